package prp

import (
	"errors"

	"github.com/berthdev/berth/errcode"
)

// Code is a stable code of the runner protocol: the code of a refused
// exchange or upgrade (ErrorResponse.Code), of a WebSocket close, and of a
// command's result (Result.Code). The strings are on the wire to deployed
// runners and never change. Code is a sub-code of errcode's set:
// ErrorCode maps it.
type Code string

// Codes of a refused exchange or connection (ErrorResponse.Code). CodeOf
// gives the codes of this package's sentinels; the controller answers the
// others.
const (
	CodeTicketMalformed    Code = "ticket_malformed"
	CodeTicketUnknown      Code = "ticket_unknown"
	CodeTicketExpired      Code = "ticket_expired"
	CodeTicketReplayed     Code = "ticket_replayed"
	CodeTicketForeign      Code = "ticket_foreign"
	CodeTicketExists       Code = "ticket_exists"
	CodeTokenMalformed     Code = "token_malformed"
	CodeTokenInvalid       Code = "token_invalid"
	CodeTokenExpired       Code = "token_expired"
	CodeVersionUnsupported Code = "version_unsupported"
	CodeFrameTooLarge      Code = "frame_too_large"
	CodeFrameInvalid       Code = "frame_invalid"

	// CodeTokenMissing: a connection without an Authorization: Bearer token.
	CodeTokenMissing Code = "token_missing"
	// CodeSessionUnknown: the token's (or the resume's) session is unknown.
	CodeSessionUnknown Code = "session_unknown"
	// CodeSessionConnected: the session is connected already.
	CodeSessionConnected Code = "session_connected"
	// CodeLeaseEnded: the session's lease is no longer active.
	CodeLeaseEnded Code = "lease_ended"
	// CodeBadRequest: the body is not an exchange request.
	CodeBadRequest Code = "bad_request"
	// CodeClosed: the controller is closed.
	CodeClosed Code = "closed"
	// CodeStoreUnavailable: the controller's store cannot be used now.
	CodeStoreUnavailable Code = "store_unavailable"
	// CodeUnavailable: records the controller needs cannot be read now.
	CodeUnavailable Code = "unavailable"
	// CodeInternal: the controller failed for a reason it does not say.
	CodeInternal Code = "internal"
)

// CodeOf returns the stable code of a prp error, or "" if err is none of
// this package's sentinels.
func CodeOf(err error) Code {
	for _, c := range []struct {
		err  error
		code Code
	}{
		{ErrTicketMalformed, CodeTicketMalformed},
		{ErrTicketUnknown, CodeTicketUnknown},
		{ErrTicketExpired, CodeTicketExpired},
		{ErrTicketReplayed, CodeTicketReplayed},
		{ErrTicketForeign, CodeTicketForeign},
		{ErrTicketExists, CodeTicketExists},
		{ErrTokenMalformed, CodeTokenMalformed},
		{ErrTokenInvalid, CodeTokenInvalid},
		{ErrTokenExpired, CodeTokenExpired},
		{ErrScopeDenied, CodeScopeDenied},
		{ErrVersionUnsupported, CodeVersionUnsupported},
		{ErrFrameTooLarge, CodeFrameTooLarge},
		{ErrFrame, CodeFrameInvalid},
	} {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// ErrorCode returns the code of errcode's set that c is a sub-code of: OK
// for ""; AuthFailed for a refused ticket or token (malformed, unknown,
// expired, replayed, foreign, invalid, missing); Denied for scope_denied and
// probe_identity; AlreadyExists for ticket_exists and task_exists; NotFound
// for session_unknown and unknown_task; Conflict for session_connected,
// lease_ended, idempotency_conflict and secret_file_refused; Invalid for
// frame_invalid, frame_too_large, bad_request and start_failed; Unsupported
// for version_unsupported; Unavailable for closed, store_unavailable,
// unavailable, interrupted, secrets_missing and secrets_unavailable;
// Internal for internal, journal_unauthenticated and events_lost; Unknown
// for a string that is none of the codes. For each of this package's
// sentinels, CodeOf(err).ErrorCode() == errcode.Code(err).
func (c Code) ErrorCode() errcode.ErrorCode {
	switch c {
	case "":
		return errcode.OK
	case CodeTicketMalformed, CodeTicketUnknown, CodeTicketExpired, CodeTicketReplayed, CodeTicketForeign,
		CodeTokenMalformed, CodeTokenInvalid, CodeTokenExpired, CodeTokenMissing:
		return errcode.AuthFailed
	case CodeScopeDenied, CodeProbeIdentity:
		return errcode.Denied
	case CodeTicketExists, CodeTaskExists:
		return errcode.AlreadyExists
	case CodeSessionUnknown, CodeUnknownTask:
		return errcode.NotFound
	case CodeSessionConnected, CodeLeaseEnded, CodeIdempotencyConflict, CodeSecretFile:
		return errcode.Conflict
	case CodeFrameInvalid, CodeFrameTooLarge, CodeBadRequest, CodeStartFailed:
		return errcode.Invalid
	case CodeVersionUnsupported:
		return errcode.Unsupported
	case CodeClosed, CodeStoreUnavailable, CodeUnavailable, CodeInterrupted, CodeSecretsMissing, CodeSecretsUnavailable:
		return errcode.Unavailable
	case CodeInternal, CodeJournalUnauthenticated, CodeEventsLost:
		return errcode.Internal
	}
	return errcode.Unknown
}
