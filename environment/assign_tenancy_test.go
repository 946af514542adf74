package environment_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

var globexAgent = authz.Principal{ID: "agent_g", Role: authz.RoleAgent, Companies: []string{"globex"}}

func wsRef(company, key string) environment.BindingRef {
	return environment.BindingRef{Kind: environment.BindingWorkspace, Company: company, Key: key}
}

// Show authorizes before it tells anything (issue 51, authz's rule): a
// binding of a company the principal holds no grant for reads exactly as
// a missing one (errcode.ErrNotFound, the same message), never as a refusal, so
// globex's agent cannot tell acme's bound keys from unbound ones.
func TestShowOfAnotherCompanysBindingReadsAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAsgFixture(t, nil)
	f.set(t, wsBind("ws_a", "acme", "full"))
	_, errBound := f.asg.Show(ctx, globexAgent, wsRef("acme", "ws_a"))
	_, errUnbound := f.asg.Show(ctx, globexAgent, wsRef("acme", "ws_none"))
	_, errOwn := f.asg.Show(ctx, globexAgent, wsRef("globex", "ws_a"))
	for name, err := range map[string]error{"acme's bound key": errBound, "acme's unbound key": errUnbound, "its own unbound key": errOwn} {
		wantErr(t, err, errcode.ErrNotFound)
		if errors.Is(err, errcode.ErrDenied) {
			t.Errorf("%s: %v is a refusal, want not found", name, err)
		}
	}
	if errBound != nil && errUnbound != nil {
		if a, b := strings.ReplaceAll(errBound.Error(), "ws_a", "K"), strings.ReplaceAll(errUnbound.Error(), "ws_none", "K"); a != b {
			t.Errorf("a bound and an unbound key read differently:\n%q\n%q", a, b)
		}
	}
	if got, err := f.asg.Show(ctx, agent, wsRef("acme", "ws_a")); err != nil || got.Company != "acme" {
		t.Errorf("acme's own agent: %+v, %v", got, err)
	}
}

// Binding keys are per company (issue 51): acme and globex each bind
// their workspace "ws" to an environment of their own, each resolves
// through its own, clearing one leaves the other, and a company's second
// binding of its key is still a conflict.
func TestTwoCompaniesBindOneWorkspaceKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAsgFixture(t, nil)
	a := f.set(t, wsBind("ws", "acme", "full"))
	g := f.set(t, wsBind("ws", "globex", "lean"))
	if a.Company != "acme" || g.Company != "globex" {
		t.Fatalf("stored %s and %s", a, g)
	}
	for company, env := range map[string]string{"acme": "full", "globex": "lean"} {
		res, err := f.asg.Resolve(ctx, admin, authz.Scope{Company: company, Workspace: "ws"}, 0)
		if err != nil || res.Environment.ID != f.ids[env] || res.Binding.Company != company {
			t.Errorf("Resolve for %s's ws: %+v, %v; want %s through its own binding", company, res, err, env)
		}
	}
	_, err := environment.Bind(f.asg, ctx, admin, environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws", Company: "acme", EnvironmentID: f.ids["lean"]})
	wantErr(t, err, errcode.ErrConflict)
	if err := f.asg.Clear(ctx, admin, a.BindingRef, environment.AnyRevision); err != nil {
		t.Fatal(err)
	}
	if got, err := f.asg.Show(ctx, admin, g.BindingRef); err != nil || got.EnvironmentID != f.ids["lean"] {
		t.Errorf("globex's ws after acme's was cleared: %+v, %v", got, err)
	}
	if _, err := f.asg.Resolve(ctx, admin, authz.Scope{Company: "acme", Workspace: "ws"}, 0); !errors.Is(err, environment.ErrNoBinding) {
		t.Errorf("acme's ws after its clear: %v, want ErrNoBinding (never globex's)", err)
	}
}
