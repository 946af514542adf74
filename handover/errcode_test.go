package handover_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/prp"
)

// A refused hand-over carries its sub-code (handover.Code, on the wire to
// the runner) and the errcode that sub-code maps to: a check that does not
// match is conflict, an unknown secret env key invalid, and a lease of
// another company not found, as a missing one (issue 24 item 3).
func TestRefusalsCarryTheirErrcode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, true)
	other := target
	other.Company = "globex"
	unknown := []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "OTHER", Env: "OTHER"}}
	for _, tc := range []struct {
		name string
		err  error
		sub  handover.Code
		want errcode.ErrorCode
	}{
		{"no project auth check", w.svc.Check(ctx, agent, target, w.uses("p1")), handover.CodeCheckMissing, errcode.Conflict},
		{"an unknown secret env key", w.svc.Check(ctx, agent, target, unknown), handover.CodeSecretUnknown, errcode.Invalid},
		{"a lease of another company", w.svc.Check(ctx, operator, other, unknown), handover.CodeLeaseMismatch, errcode.NotFound},
	} {
		if got := code(tc.err); got != tc.sub || errcode.Code(tc.err) != tc.want || tc.sub.ErrorCode() != tc.want {
			t.Errorf("%s: %v: sub-code %s, errcode %v; want %s, %v", tc.name, tc.err, got, errcode.Code(tc.err), tc.sub, tc.want)
		}
	}
}
