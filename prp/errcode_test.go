package prp_test

import (
	"fmt"
	"testing"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/prp"
)

// The wire code of each prp sentinel (CodeOf, unchanged for deployed
// runners) is a sub-code of the sentinel's errcode.
func TestWireCodesMapIntoErrcode(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		prp.ErrTicketMalformed, prp.ErrTicketUnknown, prp.ErrTicketExpired, prp.ErrTicketReplayed,
		prp.ErrTicketForeign, prp.ErrTicketExists, prp.ErrTokenMalformed, prp.ErrTokenInvalid,
		prp.ErrTokenExpired, prp.ErrScopeDenied, prp.ErrVersionUnsupported, prp.ErrFrameTooLarge, prp.ErrFrame,
	} {
		e := fmt.Errorf("exchange: %w", err)
		sub := prp.CodeOf(e)
		if sub == "" || sub.ErrorCode() != errcode.Code(e) {
			t.Errorf("%v: CodeOf = %q (ErrorCode %v), errcode.Code = %v", err, sub, sub.ErrorCode(), errcode.Code(e))
		}
	}
	// The strings on the wire do not change.
	for code, want := range map[prp.Code]string{
		prp.CodeTicketReplayed: "ticket_replayed", prp.CodeTokenMissing: "token_missing",
		prp.CodeSessionUnknown: "session_unknown", prp.CodeLeaseEnded: "lease_ended",
		prp.CodeEventsLost: "events_lost", prp.CodeSecretFile: "secret_file_refused",
		prp.CodeFrameInvalid: "frame_invalid", prp.CodeInternal: "internal",
	} {
		if string(code) != want {
			t.Errorf("wire code %q, want %q", code, want)
		}
	}
	for code, want := range map[prp.Code]errcode.ErrorCode{
		"": errcode.OK, prp.CodeTokenMissing: errcode.AuthFailed, prp.CodeScopeDenied: errcode.Denied,
		prp.CodeUnknownTask: errcode.NotFound, prp.CodeEventsLost: errcode.Internal,
		prp.CodeStoreUnavailable: errcode.Unavailable, "from_a_newer_runner": errcode.Unknown,
	} {
		if got := code.ErrorCode(); got != want {
			t.Errorf("%q.ErrorCode() = %v, want %v", code, got, want)
		}
	}
}
