package prpwire_test

import (
	"fmt"
	"testing"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// The wire code of each prp sentinel (CodeOf, unchanged for deployed
// runners) is a sub-code of the sentinel's errcode.
func TestWireCodesMapIntoErrcode(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		prp.ErrTicketMalformed, prp.ErrTicketUnknown, prp.ErrTicketExpired, prp.ErrTicketReplayed,
		prp.ErrTicketForeign, prp.ErrTicketExists, prpwire.ErrTokenMalformed, prpwire.ErrTokenInvalid,
		prpwire.ErrTokenExpired, prp.ErrScopeDenied, prpwire.ErrVersionUnsupported, prpwire.ErrFrameTooLarge, prpwire.ErrFrame,
	} {
		e := fmt.Errorf("exchange: %w", err)
		sub := prpwire.CodeOf(e)
		if sub == "" || sub.ErrorCode() != errcode.Code(e) {
			t.Errorf("%v: CodeOf = %q (ErrorCode %v), errcode.Code = %v", err, sub, sub.ErrorCode(), errcode.Code(e))
		}
	}
	// The strings on the wire do not change.
	for code, want := range map[prpwire.Code]string{
		prpwire.CodeTicketReplayed: "ticket_replayed", prpwire.CodeTokenMissing: "token_missing",
		prpwire.CodeSessionUnknown: "session_unknown", prpwire.CodeLeaseEnded: "lease_ended",
		prpwire.CodeEventsLost: "events_lost", prpwire.CodeSecretFile: "secret_file_refused",
		prpwire.CodeFrameInvalid: "frame_invalid", prpwire.CodeInternal: "internal",
	} {
		if string(code) != want {
			t.Errorf("wire code %q, want %q", code, want)
		}
	}
	for code, want := range map[prpwire.Code]errcode.ErrorCode{
		"": errcode.OK, prpwire.CodeTokenMissing: errcode.AuthFailed, prpwire.CodeScopeDenied: errcode.Denied,
		prpwire.CodeUnknownTask: errcode.NotFound, prpwire.CodeEventsLost: errcode.Internal,
		prpwire.CodeStoreUnavailable: errcode.Unavailable, "from_a_newer_runner": errcode.Unknown,
	} {
		if got := code.ErrorCode(); got != want {
			t.Errorf("%q.ErrorCode() = %v, want %v", code, got, want)
		}
	}
}
