package controller_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// The runner protocol's sentinels carry their errcode (a host classifies
// what lease.Task and lease.Handle.Run return with errcode.Code), and
// prp's carry their wire code as their reason (prpwire.CodeOf). They were
// public (prp, prp/controller) and are berth's own since issue 48; the
// root package's table lists the public ones.
func TestSentinelsCarryTheirCode(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err  error
		code errcode.ErrorCode
	}{
		"prp.ErrScopeDenied":                {prp.ErrScopeDenied, errcode.Denied},
		"prp.ErrTicketMalformed":            {prp.ErrTicketMalformed, errcode.AuthFailed},
		"prp.ErrTicketUnknown":              {prp.ErrTicketUnknown, errcode.AuthFailed},
		"prp.ErrTicketExpired":              {prp.ErrTicketExpired, errcode.AuthFailed},
		"prp.ErrTicketReplayed":             {prp.ErrTicketReplayed, errcode.AuthFailed},
		"prp.ErrTicketForeign":              {prp.ErrTicketForeign, errcode.AuthFailed},
		"prp.ErrTicketExists":               {prp.ErrTicketExists, errcode.AlreadyExists},
		"controller.ErrSecretsUnsupported":  {controller.ErrSecretsUnsupported, errcode.Unsupported},
		"controller.ErrIdempotencyConflict": {controller.ErrIdempotencyConflict, errcode.Conflict},
		"controller.ErrProofIncomplete":     {controller.ErrProofIncomplete, errcode.Unavailable},
		"controller.ErrOutputGap":           {controller.ErrOutputGap, errcode.Internal},
		"controller.ErrTaskNotRun":          {controller.ErrTaskNotRun, errcode.Conflict},
		"controller.ErrEventsLost":          {controller.ErrEventsLost, errcode.Internal},
	} {
		wrapped := fmt.Errorf("context naming the target: %w", tc.err)
		if got := errcode.Code(wrapped); got != tc.code || !errors.Is(wrapped, tc.err) {
			t.Errorf("%s wrapped: Code = %v, errors.Is = %v; want %v, true", name, got, errors.Is(wrapped, tc.err), tc.code)
		}
		if len(name) > 4 && name[:4] == "prp." {
			if got, want := errcode.ReasonOf(wrapped), string(prpwire.CodeOf(tc.err)); got != want || want == "" {
				t.Errorf("ReasonOf(%s) = %q, want the wire code %q", name, got, want)
			}
		}
	}
}
