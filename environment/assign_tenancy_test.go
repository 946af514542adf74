package environment_test

import (
	"context"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
)

// Show authorizes before it tells anything (issue 51, authz's rule): a
// binding of a company the principal holds no grant for reads exactly as
// a missing one (ErrNotFound, the same message), never as a refusal that
// names the company, so globex's agent cannot tell acme's bound keys from
// unbound ones.
func TestShowOfAnotherCompanysBindingReadsAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAsgFixture(t, nil)
	f.set(t, wsBind("ws_a", "acme", "full"))
	globex := authz.Principal{ID: "agent_g", Role: authz.RoleAgent, Companies: []string{"globex"}}
	_, errBound := f.asg.Show(ctx, globex, environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws_a"})
	_, errUnbound := f.asg.Show(ctx, globex, environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws_none"})
	wantErr(t, errBound, environment.ErrNotFound)
	wantErr(t, errUnbound, environment.ErrNotFound)
	if errBound != nil && strings.Contains(errBound.Error(), "acme") {
		t.Errorf("another company's binding: %q names its company", errBound)
	}
	if errBound != nil && errUnbound != nil {
		if a, b := strings.ReplaceAll(errBound.Error(), "ws_a", "K"), strings.ReplaceAll(errUnbound.Error(), "ws_none", "K"); a != b {
			t.Errorf("a bound and an unbound key read differently:\n%q\n%q", a, b)
		}
	}
	if got, err := f.asg.Show(ctx, agent, environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws_a"}); err != nil || got.Company != "acme" {
		t.Errorf("acme's own agent: %+v, %v", got, err)
	}
}
