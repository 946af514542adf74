package environment_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/google/go-cmp/cmp"
)

// TestDefaultPolicy is the CFG-2 / PRB-7 matrix: every role against every
// action. Agents are denied every mutation and every probe even though they
// hold a grant for the company of the resource.
func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	env := environment.Resource{Kind: environment.ResourceKindEnvironment, ID: "env_1", Name: "build"}
	companyLease := environment.Resource{Kind: "lease", ID: "lease_1", Company: "acme"}
	otherLease := environment.Resource{Kind: "lease", ID: "lease_2", Company: "globex"}
	companyAccount := environment.Resource{Kind: environment.ResourceKindManagedAccount, ID: "secret:sec_1@v1", Company: "acme"}
	otherAccount := environment.Resource{Kind: environment.ResourceKindManagedAccount, ID: "secret:sec_1@v1", Company: "globex"}
	type row struct {
		action environment.Action
		res    environment.Resource
		// allowed per principal: admin, operator, board member, agent
		allowed [4]bool
	}
	all, adminsOnly := [4]bool{true, true, true, true}, [4]bool{true, true, false, false}
	rows := []row{
		{environment.ActionRead, env, all},
		{environment.ActionReadConfig, env, adminsOnly},
		{environment.ActionCreate, env, adminsOnly},
		{environment.ActionUpdate, env, adminsOnly},
		{environment.ActionArchive, env, adminsOnly},
		{environment.ActionDelete, env, adminsOnly},
		{environment.ActionProbe, env, adminsOnly}, // PRB-7
		{environment.ActionBind, env, adminsOnly},
		{environment.ActionSetup, env, adminsOnly},
		{environment.ActionLease, companyLease, [4]bool{true, true, false, true}}, // ASG-3: own company
		{environment.ActionLease, otherLease, adminsOnly},
		{environment.ActionLease, env, adminsOnly}, // no company: never for agents
		// ASG-3, QUAL-4: company-bound records are read only with a grant.
		{environment.ActionRead, companyLease, all},
		{environment.ActionRead, otherLease, adminsOnly},
		// AUTH-2: operators record project auth checks; agents hand over a
		// managed account only for a company they hold a grant for.
		{environment.ActionAuthCheck, companyAccount, adminsOnly},
		{environment.ActionUseAccount, companyAccount, [4]bool{true, true, false, true}},
		{environment.ActionUseAccount, otherAccount, adminsOnly},
		{environment.ActionUseAccount, companyLease, adminsOnly},
		{environment.Action("launch_missiles"), env, [4]bool{}},
	}
	for _, r := range rows {
		for i, pr := range principals {
			t.Run(string(r.action)+"/"+r.res.Kind+"/"+pr.name, func(t *testing.T) {
				t.Parallel()
				err := environment.DefaultPolicy{}.Authorize(context.Background(), pr.p, r.action, r.res)
				if r.allowed[i] {
					if err != nil {
						t.Fatalf("want allowed, got %v", err)
					}
					return
				}
				wantErr(t, err, environment.ErrDenied)
				wantText(t, err, string(pr.p.Role), string(r.action))
			})
		}
	}
}

// TestDefaultPolicyUnknownPrincipal: a principal without a known role is
// denied everything, reads included.
func TestDefaultPolicyUnknownPrincipal(t *testing.T) {
	t.Parallel()
	for _, p := range []environment.Principal{{}, {ID: "x", Role: "root"}, {ID: "y", Role: "Agent"}} {
		for _, a := range []environment.Action{environment.ActionRead, environment.ActionCreate, environment.ActionProbe} {
			err := environment.DefaultPolicy{}.Authorize(context.Background(), p, a, environment.Resource{Kind: "environment"})
			wantErr(t, err, environment.ErrDenied)
		}
	}
}

// recordingAuthorizer records every decision it is asked for and denies
// those deny says.
type recordingAuthorizer struct {
	mu    sync.Mutex
	calls []string
	deny  func(environment.Action) error
}

func (r *recordingAuthorizer) Authorize(_ context.Context, p environment.Principal, a environment.Action, res environment.Resource) error {
	r.mu.Lock()
	r.calls = append(r.calls, p.ID+" "+string(a)+" "+res.Kind+":"+res.Name)
	r.mu.Unlock()
	if r.deny != nil {
		return r.deny(a)
	}
	return nil
}

// TestCatalogUsesHostAuthorizer (AUTH-1): the catalog decides through the
// host's Authorizer, and a host refusal that forgets ErrDenied is still
// reported as ErrDenied.
func TestCatalogUsesHostAuthorizer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recordingAuthorizer{}
	f := newFixture(t, func(o *environment.Options) { o.Authorizer = rec })
	// The host lets an "agent" create: the host's policy, not the default, decides.
	v, err := f.cat.Create(ctx, agent, remoteRequest("by-host-policy"))
	if err != nil {
		t.Fatalf("host policy allows, got %v", err)
	}
	if _, err := f.cat.Get(ctx, agent, v.ID); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"agent_1 create environment:by-host-policy",
		"agent_1 read environment:by-host-policy",
		"agent_1 read_config environment:by-host-policy",
	}
	if diff := cmp.Diff(want, rec.calls); diff != "" {
		t.Errorf("authorizer calls (-want +got):\n%s", diff)
	}

	rec.deny = func(a environment.Action) error {
		if a == environment.ActionUpdate {
			return errors.New("host says no")
		}
		return nil
	}
	name := "renamed"
	_, err = f.cat.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: 1, Name: &name})
	wantErr(t, err, environment.ErrDenied)
	wantText(t, err, "host says no", "update")
	if got, _ := f.cat.Get(ctx, admin, v.ID); got.Name != "by-host-policy" || got.Revision != 1 {
		t.Errorf("denied update changed the record: %+v", got)
	}
}

// TestDeniedErrorNamesPrincipalAndAction: refusals say who was refused what,
// and nothing else.
func TestDeniedErrorNamesPrincipalAndAction(t *testing.T) {
	t.Parallel()
	err := environment.Denied(agent, environment.ActionProbe, environment.Resource{Kind: "environment", ID: "env_9", Name: "gpu"})
	want := `environment: agent "agent_1" may not probe environment "gpu" (env_9): environment: permission denied`
	if err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
	if strings.Contains(err.Error(), "acme") {
		t.Errorf("denial leaks grants: %q", err)
	}
}
