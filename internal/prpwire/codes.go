package prpwire

import (
	"errors"

	"github.com/berthdev/berth/errcode"

	"github.com/berthdev/berth/internal/prp"
)

// Code is a stable code of the runner protocol: the code of a refused
// exchange or upgrade (the runner reads it), of a WebSocket close, and of a
// command's result (prp.Result.Code). The strings are on the wire to
// deployed runners, are listed in docs/errors.md as reasons, and never
// change; ErrorCode maps one into errcode's set.
type Code string

// Codes of a refused exchange or connection (ErrorResponse.Code), untyped
// so that they set prp.Result.Code (a string) as they are. CodeOf
// gives the codes of this package's sentinels; the controller answers the
// others.
const (
	CodeTicketMalformed    = "ticket_malformed"
	CodeTicketUnknown      = "ticket_unknown"
	CodeTicketExpired      = "ticket_expired"
	CodeTicketReplayed     = "ticket_replayed"
	CodeTicketForeign      = "ticket_foreign"
	CodeTicketExists       = "ticket_exists"
	CodeTokenMalformed     = "token_malformed"
	CodeTokenInvalid       = "token_invalid"
	CodeTokenExpired       = "token_expired"
	CodeVersionUnsupported = "version_unsupported"
	CodeFrameTooLarge      = "frame_too_large"
	CodeFrameInvalid       = "frame_invalid"

	// CodeTokenMissing: a connection without an Authorization: Bearer token.
	CodeTokenMissing = "token_missing"
	// CodeSessionUnknown: the token's (or the resume's) session is unknown.
	CodeSessionUnknown = "session_unknown"
	// CodeSessionConnected: the session is connected already.
	CodeSessionConnected = "session_connected"
	// CodeLeaseEnded: the session's lease is no longer active.
	CodeLeaseEnded = "lease_ended"
	// CodeBadRequest: the body is not an exchange request.
	CodeBadRequest = "bad_request"
	// CodeClosed: the controller is closed.
	CodeClosed = "closed"
	// CodeStoreUnavailable: the controller's store cannot be used now.
	CodeStoreUnavailable = "store_unavailable"
	// CodeUnavailable: records the controller needs cannot be read now.
	CodeUnavailable = "unavailable"
	// CodeInternal: the controller failed for a reason it does not say.
	CodeInternal = "internal"
	// CodeAtCapacity: the controller serves its ceiling of runner
	// connections or of output bytes in flight (HTTP 503 with a
	// Retry-After): a passing refusal, the runner retries with its backoff.
	CodeAtCapacity = "at_capacity"
)

// Result codes (prp.Result.Code), set by the runner; CodeEventsLost is set by
// the controller.
const (
	// CodeIdempotencyConflict: a command id was reused for another command.
	CodeIdempotencyConflict = "idempotency_conflict"
	// CodeProbeIdentity: a probe identity runs no task.
	CodeProbeIdentity = "probe_identity"
	// CodeScopeDenied: the session's scope does not allow the command (also
	// the code of prp.ErrScopeDenied on the exchange).
	CodeScopeDenied = "scope_denied"
	// CodeStartFailed: the task's process could not be started.
	CodeStartFailed = "start_failed"
	// CodeUnknownTask: no task of that id was started here.
	CodeUnknownTask = "unknown_task"
	// CodeTaskExists: a task of that id was started before.
	CodeTaskExists = "task_exists"
	// CodeInterrupted: the runner restarted while the command was
	// executing (ResultIndeterminate), or after it received the command
	// and before it started it (ResultRejected: nothing ran).
	CodeInterrupted = "interrupted"
	// CodeJournalUnauthenticated: a record of the command in the runner's
	// journal failed its authentication (a task may have written it); the
	// command is indeterminate and never run again.
	CodeJournalUnauthenticated = "journal_unauthenticated"
	// CodeSecretsMissing: a task.start with secrets found no values at the
	// runner (the runner restarted after it received the command, so the
	// values that live only in its memory are gone); nothing ran.
	CodeSecretsMissing = "secrets_missing"
	// CodeSecretsUnavailable: the controller could not resolve the task's
	// secrets at delivery (SecretValues.Code says more); nothing ran.
	CodeSecretsUnavailable = "secrets_unavailable"
	// CodeSecretFile: a secret file could not be created safely by the
	// runner itself (a file or symlink already at its path, a symlink in
	// a parent directory); nothing was written and nothing ran.
	CodeSecretFile = "secret_file_refused"
	// CodeEventsLost: the controller failed the command because events of
	// the runner were lost (a gap in the stored sequence): the result is
	// indeterminate and the message names the range.
	CodeEventsLost = "events_lost"
)

// CodeOf returns the stable code of a prp error, or "" if err is none of
// this package's sentinels.
func CodeOf(err error) Code {
	for _, c := range []struct {
		err  error
		code Code
	}{
		{prp.ErrTicketMalformed, CodeTicketMalformed},
		{prp.ErrTicketUnknown, CodeTicketUnknown},
		{prp.ErrTicketExpired, CodeTicketExpired},
		{prp.ErrTicketReplayed, CodeTicketReplayed},
		{prp.ErrTicketForeign, CodeTicketForeign},
		{prp.ErrTicketExists, CodeTicketExists},
		{ErrTokenMalformed, CodeTokenMalformed},
		{ErrTokenInvalid, CodeTokenInvalid},
		{ErrTokenExpired, CodeTokenExpired},
		{prp.ErrScopeDenied, CodeScopeDenied},
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

// ErrorCode returns the code of errcode's set that c is finer than: OK
// for ""; AuthFailed for a refused ticket or token (malformed, unknown,
// expired, replayed, foreign, invalid, missing); Denied for scope_denied and
// probe_identity; AlreadyExists for ticket_exists and task_exists; NotFound
// for session_unknown and unknown_task; Conflict for session_connected,
// lease_ended, idempotency_conflict and secret_file_refused; Invalid for
// frame_invalid, frame_too_large, bad_request and start_failed; Unsupported
// for version_unsupported; Unavailable for closed, store_unavailable,
// unavailable, interrupted, secrets_missing and secrets_unavailable;
// Internal for internal, journal_unauthenticated and events_lost; Unknown
// for a string that is none of the codes. For each sentinel of the
// protocol, CodeOf(err).ErrorCode() is errcode.Code(err).
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
	case CodeClosed, CodeStoreUnavailable, CodeUnavailable, CodeAtCapacity, CodeInterrupted, CodeSecretsMissing, CodeSecretsUnavailable:
		return errcode.Unavailable
	case CodeInternal, CodeJournalUnauthenticated, CodeEventsLost:
		return errcode.Internal
	}
	return errcode.Unknown
}
