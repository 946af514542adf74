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
		{prp.ErrScopeDenied, prp.CodeScopeDenied},
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
