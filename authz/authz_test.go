package authz_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
)

// The four principals of every table (CFG-2). The agent holds a company
// grant: grants never widen catalog rights.
var (
	admin    = authz.Principal{ID: "u_admin", Role: authz.RoleInstanceAdmin}
	operator = authz.Principal{ID: "u_op", Role: authz.RoleLocalOperator}
	board    = authz.Principal{ID: "u_board", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	agent    = authz.Principal{ID: "agent_1", Role: authz.RoleAgent, Companies: []string{"acme"}}
)

var principals = []struct {
	name string
	p    authz.Principal
}{{"admin", admin}, {"operator", operator}, {"board member", board}, {"agent", agent}}

func wantErr(t testing.TB, err error, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v does not wrap %q", err, target)
	}
}

func wantText(t testing.TB, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("error %v does not mention %q", err, p)
		}
	}
}

// TestScopeString names what the scope has and nothing else.
func TestScopeString(t *testing.T) {
	t.Parallel()
	for s, want := range map[authz.Scope]string{
		{Company: "acme"}: `company "acme"`,
		{Company: "acme", Workspace: "ws_1", Project: "p_1", Agent: "a_1"}: `company "acme" (workspace ws_1, project p_1, agent a_1)`,
		{Company: "acme", Agent: "a_1"}:                                    `company "acme" (agent a_1)`,
	} {
		if got := s.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", s, got, want)
		}
	}
}

// TestDefaultPolicy is the CFG-2 / PRB-7 matrix: every role against every
// action. Agents are denied every mutation and every probe even though they
// hold a grant for the company of the resource.
func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	env := authz.Resource{Kind: authz.ResourceKindEnvironment, ID: "env_1", Name: "build"}
	companyLease := authz.Resource{Kind: "lease", ID: "lease_1", Company: "acme"}
	otherLease := authz.Resource{Kind: "lease", ID: "lease_2", Company: "globex"}
	companyAccount := authz.Resource{Kind: authz.ResourceKindManagedAccount, ID: "secret:sec_1@v1", Company: "acme"}
	otherAccount := authz.Resource{Kind: authz.ResourceKindManagedAccount, ID: "secret:sec_1@v1", Company: "globex"}
	type row struct {
		action authz.Action
		res    authz.Resource
		// allowed per principal: admin, operator, board member, agent
		allowed [4]bool
	}
	all, adminsOnly := [4]bool{true, true, true, true}, [4]bool{true, true, false, false}
	rows := []row{
		{authz.ActionRead, env, all},
		{authz.ActionReadConfig, env, adminsOnly},
		{authz.ActionCreate, env, adminsOnly},
		{authz.ActionUpdate, env, adminsOnly},
		{authz.ActionArchive, env, adminsOnly},
		{authz.ActionDelete, env, adminsOnly},
		{authz.ActionProbe, env, adminsOnly}, // PRB-7
		{authz.ActionBind, env, adminsOnly},
		{authz.ActionSetup, env, adminsOnly},
		{authz.ActionLease, companyLease, [4]bool{true, true, false, true}}, // ASG-3: own company
		{authz.ActionLease, otherLease, adminsOnly},
		{authz.ActionLease, env, adminsOnly}, // no company: never for agents
		// ASG-3, QUAL-4: company-bound records are read only with a grant.
		{authz.ActionRead, companyLease, all},
		{authz.ActionRead, otherLease, adminsOnly},
		// AUTH-2: operators record project auth checks; agents hand over a
		// managed account only for a company they hold a grant for.
		{authz.ActionAuthCheck, companyAccount, adminsOnly},
		{authz.ActionUseAccount, companyAccount, [4]bool{true, true, false, true}},
		{authz.ActionUseAccount, otherAccount, adminsOnly},
		{authz.ActionUseAccount, companyLease, adminsOnly},
		// A workspace's source read with the host's identity: operators.
		{authz.ActionReadHost, companyLease, adminsOnly},
		{authz.Action("launch_missiles"), env, [4]bool{}},
	}
	for _, r := range rows {
		for i, pr := range principals {
			t.Run(string(r.action)+"/"+r.res.Kind+"/"+pr.name, func(t *testing.T) {
				t.Parallel()
				err := authz.DefaultPolicy{}.Authorize(context.Background(), pr.p, r.action, r.res)
				if r.allowed[i] {
					if err != nil {
						t.Fatalf("want allowed, got %v", err)
					}
					return
				}
				wantErr(t, err, errcode.ErrDenied)
				wantText(t, err, string(pr.p.Role), string(r.action))
			})
		}
	}
}

// TestDefaultPolicyUnknownPrincipal: a principal without a known role is
// denied everything, reads included.
func TestDefaultPolicyUnknownPrincipal(t *testing.T) {
	t.Parallel()
	for _, p := range []authz.Principal{{}, {ID: "x", Role: "root"}, {ID: "y", Role: "Agent"}} {
		for _, a := range []authz.Action{authz.ActionRead, authz.ActionCreate, authz.ActionProbe} {
			err := authz.DefaultPolicy{}.Authorize(context.Background(), p, a, authz.Resource{Kind: "environment"})
			wantErr(t, err, errcode.ErrDenied)
		}
	}
}

// TestDeniedErrorNamesPrincipalAndAction: refusals say who was refused what,
// and nothing else.
func TestDeniedErrorNamesPrincipalAndAction(t *testing.T) {
	t.Parallel()
	err := authz.Denied(agent, authz.ActionProbe, authz.Resource{Kind: "environment", ID: "env_9", Name: "gpu"})
	want := `agent "agent_1" may not probe environment "gpu" (env_9): permission denied`
	if err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
	if strings.Contains(err.Error(), "acme") {
		t.Errorf("denial leaks grants: %q", err)
	}
}

// Issue 27: on templates operators act (setup, read_config), board members
// read, agents nothing, not even with a company grant.
func TestDefaultPolicyTemplates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := authz.Resource{Kind: authz.ResourceKindTemplate, ID: "tpl_1", Name: "env_1"}
	for _, tc := range []struct {
		p     authz.Principal
		a     authz.Action
		allow bool
	}{
		{admin, authz.ActionSetup, true}, {operator, authz.ActionSetup, true}, {operator, authz.ActionReadConfig, true},
		{board, authz.ActionRead, true}, {board, authz.ActionReadConfig, false}, {board, authz.ActionSetup, false},
		{agent, authz.ActionRead, false}, {agent, authz.ActionSetup, false}, {agent, authz.ActionReadConfig, false},
	} {
		err := authz.DefaultPolicy{}.Authorize(ctx, tc.p, tc.a, r)
		if (err == nil) != tc.allow {
			t.Errorf("%s %s on a template: %v, want allowed %v", tc.p.Role, tc.a, err, tc.allow)
		}
	}
	// Agents still read environments of a granted company.
	if err := (authz.DefaultPolicy{}).Authorize(ctx, agent, authz.ActionRead, authz.Resource{Kind: authz.ResourceKindEnvironment, ID: "env_1"}); err != nil {
		t.Errorf("agent read of an environment: %v", err)
	}
}

// Issues 30 and 31: instance-scoped leases (setup sandboxes, pool members)
// are read by every known role and acted on by operators only; a grant
// naming InstanceCompany covers nothing.
func TestDefaultPolicyInstanceCompany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := authz.Resource{Kind: authz.ResourceKindLease, ID: "lse_1", Company: authz.InstanceCompany}
	granted := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{authz.InstanceCompany}}
	grantedBoard := authz.Principal{ID: "bm", Role: authz.RoleBoardMember, Companies: []string{authz.InstanceCompany}}
	if granted.HasCompany(authz.InstanceCompany) {
		t.Error("HasCompany(InstanceCompany) is true for a principal granted it")
	}
	for _, tc := range []struct {
		p     authz.Principal
		a     authz.Action
		allow bool
	}{
		{admin, authz.ActionLease, true}, {operator, authz.ActionLease, true},
		{board, authz.ActionRead, true}, {grantedBoard, authz.ActionLease, false},
		{agent, authz.ActionRead, true}, {agent, authz.ActionLease, false},
		{granted, authz.ActionLease, false}, {granted, authz.ActionRead, true},
	} {
		err := authz.DefaultPolicy{}.Authorize(ctx, tc.p, tc.a, r)
		if (err == nil) != tc.allow {
			t.Errorf("%s %v %s on an instance lease: %v, want allowed %v", tc.p.Role, tc.p.Companies, tc.a, err, tc.allow)
		}
	}
	scoped := authz.Resource{Kind: authz.ResourceKindEnvironment, ID: "env_1", Company: authz.InstanceCompany,
		Scope: &authz.Scope{Company: authz.InstanceCompany}}
	if err := (authz.DefaultPolicy{}).Authorize(ctx, granted, authz.ActionLease, scoped); err == nil {
		t.Error("an agent granted InstanceCompany leased through an instance scope")
	}
}
