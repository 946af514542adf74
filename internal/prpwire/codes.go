package prpwire

import (
	"errors"

	"github.com/berthdev/berth/prp"
)

// Codes of a refused exchange or connection (ErrorResponse.Code). CodeOf
// gives the codes of this package's sentinels; the controller answers the
// others.
const (
	CodeTicketMalformed    prp.Code = "ticket_malformed"
	CodeTicketUnknown      prp.Code = "ticket_unknown"
	CodeTicketExpired      prp.Code = "ticket_expired"
	CodeTicketReplayed     prp.Code = "ticket_replayed"
	CodeTicketForeign      prp.Code = "ticket_foreign"
	CodeTicketExists       prp.Code = "ticket_exists"
	CodeTokenMalformed     prp.Code = "token_malformed"
	CodeTokenInvalid       prp.Code = "token_invalid"
	CodeTokenExpired       prp.Code = "token_expired"
	CodeVersionUnsupported prp.Code = "version_unsupported"
	CodeFrameTooLarge      prp.Code = "frame_too_large"
	CodeFrameInvalid       prp.Code = "frame_invalid"

	// CodeTokenMissing: a connection without an Authorization: Bearer token.
	CodeTokenMissing prp.Code = "token_missing"
	// CodeSessionUnknown: the token's (or the resume's) session is unknown.
	CodeSessionUnknown prp.Code = "session_unknown"
	// CodeSessionConnected: the session is connected already.
	CodeSessionConnected prp.Code = "session_connected"
	// CodeLeaseEnded: the session's lease is no longer active.
	CodeLeaseEnded prp.Code = "lease_ended"
	// CodeBadRequest: the body is not an exchange request.
	CodeBadRequest prp.Code = "bad_request"
	// CodeClosed: the controller is closed.
	CodeClosed prp.Code = "closed"
	// CodeStoreUnavailable: the controller's store cannot be used now.
	CodeStoreUnavailable prp.Code = "store_unavailable"
	// CodeUnavailable: records the controller needs cannot be read now.
	CodeUnavailable prp.Code = "unavailable"
	// CodeInternal: the controller failed for a reason it does not say.
	CodeInternal prp.Code = "internal"
)

// Result codes (prp.Result.Code), set by the runner; CodeEventsLost is set by
// the controller.
const (
	// CodeIdempotencyConflict: a command id was reused for another command.
	CodeIdempotencyConflict prp.Code = "idempotency_conflict"
	// CodeProbeIdentity: a probe identity runs no task.
	CodeProbeIdentity prp.Code = "probe_identity"
	// CodeScopeDenied: the session's scope does not allow the command (also
	// the code of prp.ErrScopeDenied on the exchange).
	CodeScopeDenied prp.Code = "scope_denied"
	// CodeStartFailed: the task's process could not be started.
	CodeStartFailed prp.Code = "start_failed"
	// CodeUnknownTask: no task of that id was started here.
	CodeUnknownTask prp.Code = "unknown_task"
	// CodeTaskExists: a task of that id was started before.
	CodeTaskExists prp.Code = "task_exists"
	// CodeInterrupted: the runner restarted while the command was
	// executing (ResultIndeterminate), or after it received the command
	// and before it started it (ResultRejected: nothing ran).
	CodeInterrupted prp.Code = "interrupted"
	// CodeJournalUnauthenticated: a record of the command in the runner's
	// journal failed its authentication (a task may have written it); the
	// command is indeterminate and never run again.
	CodeJournalUnauthenticated prp.Code = "journal_unauthenticated"
	// CodeSecretsMissing: a task.start with secrets found no values at the
	// runner (the runner restarted after it received the command, so the
	// values that live only in its memory are gone); nothing ran.
	CodeSecretsMissing prp.Code = "secrets_missing"
	// CodeSecretsUnavailable: the controller could not resolve the task's
	// secrets at delivery (SecretValues.Code says more); nothing ran.
	CodeSecretsUnavailable prp.Code = "secrets_unavailable"
	// CodeSecretFile: a secret file could not be created safely by the
	// runner itself (a file or symlink already at its path, a symlink in
	// a parent directory); nothing was written and nothing ran.
	CodeSecretFile prp.Code = "secret_file_refused"
	// CodeEventsLost: the controller failed the command because events of
	// the runner were lost (a gap in the stored sequence): the result is
	// indeterminate and the message names the range.
	CodeEventsLost prp.Code = "events_lost"
)

// CodeOf returns the stable code of a prp error, or "" if err is none of
// this package's sentinels.
func CodeOf(err error) prp.Code {
	for _, c := range []struct {
		err  error
		code prp.Code
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
