package handover_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// A refused hand-over carries its reason (a string of docs/errors.md, on the wire to
// the runner) and the errcode that sub-code maps to: a check that does not
// match is conflict, an unknown secret env key invalid, and a lease of
// another company not found, as a missing one (issue 24 item 3).
func TestRefusalsCarryTheirErrcode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, true)
	other := target
	other.Company = "globex"
	unknown := []lease.SecretUse{{Source: lease.SecretFromEnvironment, Ref: "OTHER", Env: "OTHER"}}
	for _, tc := range []struct {
		name string
		err  error
		sub  string
		want errcode.ErrorCode
	}{
		{"no project auth check", w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses("p1")), "auth_check_missing", errcode.Conflict},
		{"an unknown secret env key", w.svc.Check(ctx, agent, target.Company, target.Lease, unknown), "secret_unknown", errcode.Invalid},
		{"a lease of another company", w.svc.Check(ctx, operator, other.Company, other.Lease, unknown), "lease_mismatch", errcode.NotFound},
	} {
		if got := code(tc.err); got != tc.sub || errcode.Code(tc.err) != tc.want || errcode.ReasonOf(tc.err) != tc.sub {
			t.Errorf("%s: %v: reason %s (ReasonOf %q), errcode %v; want %s, %v", tc.name, tc.err, got, errcode.ReasonOf(tc.err), errcode.Code(tc.err), tc.sub, tc.want)
		}
	}
}
