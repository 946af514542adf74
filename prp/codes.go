package prp

import (
	"github.com/berthdev/berth/errcode"
)

// Code is a stable code of the runner protocol: the code of a refused
// exchange or upgrade (the runner reads it), of a WebSocket close, and of a
// command's result (Result.Code). The strings are on the wire to deployed
// runners and never change. Code is a sub-code of errcode's set:
// ErrorCode maps it.
type Code string

// The codes of a refused exchange or connection: internal/prpwire exports
// them (the controller and the runner answer and read them); a host sees
// them only as the errcode.AuthFailed, Unavailable, ... they map to.
const (
	codeTicketMalformed    Code = "ticket_malformed"
	codeTicketUnknown      Code = "ticket_unknown"
	codeTicketExpired      Code = "ticket_expired"
	codeTicketReplayed     Code = "ticket_replayed"
	codeTicketForeign      Code = "ticket_foreign"
	codeTicketExists       Code = "ticket_exists"
	codeTokenMalformed     Code = "token_malformed"
	codeTokenInvalid       Code = "token_invalid"
	codeTokenExpired       Code = "token_expired"
	codeVersionUnsupported Code = "version_unsupported"
	codeFrameTooLarge      Code = "frame_too_large"
	codeFrameInvalid       Code = "frame_invalid"
	codeTokenMissing       Code = "token_missing"
	codeSessionUnknown     Code = "session_unknown"
	codeSessionConnected   Code = "session_connected"
	codeLeaseEnded         Code = "lease_ended"
	codeBadRequest         Code = "bad_request"
	codeClosed             Code = "closed"
	codeStoreUnavailable   Code = "store_unavailable"
	codeUnavailable        Code = "unavailable"
	codeInternal           Code = "internal"
)

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
// for a string that is none of the codes. For each sentinel of the protocol, the
// code internal/prpwire.CodeOf gives maps to the sentinel's errcode.Code.
func (c Code) ErrorCode() errcode.ErrorCode {
	switch c {
	case "":
		return errcode.OK
	case codeTicketMalformed, codeTicketUnknown, codeTicketExpired, codeTicketReplayed, codeTicketForeign,
		codeTokenMalformed, codeTokenInvalid, codeTokenExpired, codeTokenMissing:
		return errcode.AuthFailed
	case codeScopeDenied, codeProbeIdentity:
		return errcode.Denied
	case codeTicketExists, codeTaskExists:
		return errcode.AlreadyExists
	case codeSessionUnknown, codeUnknownTask:
		return errcode.NotFound
	case codeSessionConnected, codeLeaseEnded, codeIdempotencyConflict, codeSecretFile:
		return errcode.Conflict
	case codeFrameInvalid, codeFrameTooLarge, codeBadRequest, codeStartFailed:
		return errcode.Invalid
	case codeVersionUnsupported:
		return errcode.Unsupported
	case codeClosed, codeStoreUnavailable, codeUnavailable, codeInterrupted, codeSecretsMissing, codeSecretsUnavailable:
		return errcode.Unavailable
	case codeInternal, codeJournalUnauthenticated, codeEventsLost:
		return errcode.Internal
	}
	return errcode.Unknown
}
