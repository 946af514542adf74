package environment_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// TestSetAuthorization (CFG-2, AUTH-1): binding is a mutation; only
// instance admins and local operators bind; board members and agents are
// denied, agents even with a grant for the binding's company; a denied bind
// stores nothing.
func TestSetAuthorization(t *testing.T) {
	t.Parallel()
	for _, tc := range principals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newAsgFixture(t, nil)
			req := environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme", EnvironmentID: f.ids["full"]}
			b, err := environment.Bind(f.asg, context.Background(), tc.p, req)
			allowed := tc.p.Role == authz.RoleInstanceAdmin || tc.p.Role == authz.RoleLocalOperator
			if !allowed {
				wantErr(t, err, errcode.ErrDenied)
				wantText(t, err, string(tc.p.Role), "bind")
				if _, gerr := f.bindings.GetBinding(context.Background(), environment.BindingRef{Kind: req.Kind, Key: req.Key}); !errors.Is(gerr, errcode.ErrNotFound) {
					t.Errorf("denied bind stored a binding (get: %v)", gerr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Set: %v", err)
			}
			want := &environment.Binding{
				BindingRef:    environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme"},
				EnvironmentID: f.ids["full"], Revision: 1, CreatedAt: t0, UpdatedAt: t0, CreatedBy: tc.p.ID, UpdatedBy: tc.p.ID,
			}
			if d := cmp.Diff(want, b); d != "" {
				t.Errorf("Set result (-want +got):\n%s", d)
			}
			got, err := f.asg.Show(context.Background(), tc.p, b.BindingRef)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Show (-want +got):\n%s", d)
			}
		})
	}
}

// TestSetRefusals (ASG-2, CFG-4, ASG-3): a binding must point at an
// existing, active, usable environment; bindings keep their company;
// revisions are checked. A refused Set changes nothing.
func TestSetRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		existing []bind
		p        authz.Principal
		req      environment.SetBinding
		env      string // name of the environment to bind; overrides req.EnvironmentID
		strict   bool
		wantErr  []error
		wantText []string
	}{
		{name: "a missing environment is not found", p: admin, env: "missing",
			req:     environment.SetBinding{Kind: environment.BindingProject, Key: "p_1", Company: "acme"},
			wantErr: []error{errcode.ErrNotFound}},
		{name: "a missing environment is denied to an agent, not revealed", p: agent, env: "missing",
			req:     environment.SetBinding{Kind: environment.BindingProject, Key: "p_1", Company: "acme"},
			wantErr: []error{errcode.ErrDenied}},
		{name: "an archived environment cannot be bound", p: admin, env: "old",
			req:     environment.SetBinding{Kind: environment.BindingProject, Key: "p_1", Company: "acme"},
			wantErr: []error{environment.ErrArchived}, wantText: []string{"project p_1 binding", `"old"`}},
		{name: "an unavailable provider cannot be bound", p: admin, env: "down",
			req:     environment.SetBinding{Kind: environment.BindingAgent, Key: "agent_1", Company: "acme"},
			wantErr: []error{drivers.ErrUnavailable}},
		{name: "an unregistered driver cannot be bound", p: admin, env: "retired",
			req:     environment.SetBinding{Kind: environment.BindingAgent, Key: "agent_1", Company: "acme"},
			wantErr: []error{drivers.ErrUnavailable}},
		{name: "a test driver cannot be bound outside test mode", p: admin, env: "full", strict: true,
			req:     environment.SetBinding{Kind: environment.BindingInstanceDefault},
			wantErr: []error{drivers.ErrUnavailable}, wantText: []string{"for tests only"}},
		{name: "an unknown kind is invalid", p: admin, env: "full",
			req:     environment.SetBinding{Kind: "team", Key: "t_1", Company: "acme"},
			wantErr: []error{errcode.ErrInvalid}, wantText: []string{`"kind"`}},
		{name: "a workspace binding needs a company", p: admin, env: "full",
			req:     environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1"},
			wantErr: []error{errcode.ErrInvalid}, wantText: []string{`"company"`}},
		{name: "the instance default has no company", p: admin, env: "full",
			req:     environment.SetBinding{Kind: environment.BindingInstanceDefault, Company: "acme"},
			wantErr: []error{errcode.ErrInvalid}, wantText: []string{`"company"`}},
		{name: "creating over an existing binding is a conflict", p: admin, env: "lean",
			existing: []bind{wsBind("ws_1", "acme", "full")},
			req:      environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme"},
			wantErr:  []error{errcode.ErrConflict}},
		{name: "a stale base revision is a conflict", p: admin, env: "lean",
			existing: []bind{wsBind("ws_1", "acme", "full")},
			req:      environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme", BaseRevision: 2},
			wantErr:  []error{errcode.ErrConflict}, wantText: []string{"stale revision 2"}},
		{name: "replacing a missing binding is not found", p: admin, env: "lean",
			req:     environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme", BaseRevision: 1},
			wantErr: []error{errcode.ErrNotFound}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newAsgFixture(t, nil)
			f.put(t, tc.existing...)
			asg := f.asg
			if tc.strict {
				asg = f.strict
			}
			tc.req.EnvironmentID = f.ids[tc.env]
			before, err := f.bindings.ListBindings(context.Background(), environment.BindingFilter{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := environment.Bind(asg, context.Background(), tc.p, tc.req)
			if b != nil {
				t.Errorf("Set returned a binding (%s) with its error", b)
			}
			wantErr(t, err, tc.wantErr...)
			wantText(t, err, tc.wantText...)
			after, err := f.bindings.ListBindings(context.Background(), environment.BindingFilter{})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(before, after); d != "" {
				t.Errorf("a refused Set changed the bindings (-before +after):\n%s", d)
			}
		})
	}
}

// TestSetRevisions: Set with the stored revision or AnyRevision replaces the
// binding, keeping who created it and when; Clear checks revisions too.
func TestSetRevisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAsgFixture(t, nil)
	first := f.set(t, wsBind("ws_1", "acme", "full"))
	f.clock.Advance(time.Minute)
	second, err := environment.Bind(f.asg, ctx, operator, environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1",
		Company: "acme", EnvironmentID: f.ids["lean"], BaseRevision: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := *first
	want.EnvironmentID, want.Revision, want.UpdatedAt, want.UpdatedBy = f.ids["lean"], 2, t0.Add(time.Minute), operator.ID
	if d := cmp.Diff(&want, second); d != "" {
		t.Errorf("replace (-want +got):\n%s", d)
	}
	third, err := environment.Bind(f.asg, ctx, admin, environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1",
		Company: "acme", EnvironmentID: f.ids["host"], BaseRevision: environment.AnyRevision})
	if err != nil {
		t.Fatal(err)
	}
	if third.Revision != 3 || third.EnvironmentID != f.ids["host"] || third.CreatedBy != admin.ID || !third.CreatedAt.Equal(t0) {
		t.Errorf("AnyRevision replace = %+v, want revision 3 of host created by %s at %v", third, admin.ID, t0)
	}
	fresh, err := environment.Bind(f.asg, ctx, admin, environment.SetBinding{Kind: environment.BindingProject, Key: "p_1",
		Company: "acme", EnvironmentID: f.ids["host"], BaseRevision: environment.AnyRevision})
	if err != nil || fresh.Revision != 1 {
		t.Errorf("AnyRevision on a new key = %+v, %v; want revision 1", fresh, err)
	}

	wantErr(t, f.asg.Clear(ctx, admin, third.BindingRef, 2), errcode.ErrConflict)
	wantErr(t, f.asg.Clear(ctx, agent, third.BindingRef, 3), errcode.ErrDenied)
	wantErr(t, f.asg.Clear(ctx, board, third.BindingRef, environment.AnyRevision), errcode.ErrDenied)
	if err := f.asg.Clear(ctx, operator, third.BindingRef, 3); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	wantErr(t, f.asg.Clear(ctx, admin, third.BindingRef, environment.AnyRevision), errcode.ErrNotFound)
	wantErr(t, f.asg.Clear(ctx, agent, third.BindingRef, environment.AnyRevision), errcode.ErrDenied)
	_, err = f.asg.Show(ctx, admin, third.BindingRef)
	wantErr(t, err, errcode.ErrNotFound)
	if err := f.asg.Clear(ctx, admin, fresh.BindingRef, environment.AnyRevision); err != nil {
		t.Fatalf("Clear with AnyRevision: %v", err)
	}
}

// TestListBindings: List filters as the store does and leaves out bindings
// of companies the Authorizer does not let the principal read.
func TestListBindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A host policy: board members read bindings of their companies only.
	policy := authz.AuthorizerFunc(func(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
		if p.Role == authz.RoleBoardMember && a == authz.ActionRead && r.Kind == authz.ResourceKindBinding {
			if r.Company == "" || p.HasCompany(r.Company) {
				return nil
			}
			return authz.Denied(p, a, r)
		}
		return authz.DefaultPolicy{}.Authorize(ctx, p, a, r)
	})
	f := newAsgFixture(t, nil)
	scoped := environment.NewAssignments(f.bindings, f.envs, assignRegistry(), &environment.Options{TestMode: true, Authorizer: policy})
	f.put(t, wsBind("ws_1", "acme", "full"), wsBind("ws_2", "globex", "full"), projectBind("p_1", "acme", "lean"), defaultBind("host"))
	refs := func(bs []*environment.Binding) []string {
		out := []string{}
		for _, b := range bs {
			out = append(out, b.BindingRef.ID())
		}
		return out
	}
	tests := []struct {
		name string
		p    authz.Principal
		f    environment.BindingFilter
		want []string
	}{
		{"admin lists every binding", admin, environment.BindingFilter{}, []string{"instance_default", "project:p_1", "workspace:ws_1", "workspace:ws_2"}},
		{"admin filters by environment", admin, environment.BindingFilter{EnvironmentID: f.ids["full"]}, []string{"workspace:ws_1", "workspace:ws_2"}},
		{"admin filters by company and kind", admin, environment.BindingFilter{Company: "acme", Kind: environment.BindingWorkspace}, []string{"workspace:ws_1"}},
		{"board member of acme sees acme's and the instance default", board, environment.BindingFilter{}, []string{"instance_default", "project:p_1", "workspace:ws_1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := scoped.List(ctx, tc.p, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, refs(got)); d != "" {
				t.Errorf("List (-want +got):\n%s", d)
			}
		})
	}
	t.Run("board member reads another company's binding as missing", func(t *testing.T) {
		t.Parallel()
		_, err := scoped.Show(ctx, board, environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws_2"})
		wantErr(t, err, errcode.ErrNotFound)
	})
}

// TestDeleteClearsBindings (ASG-5, CFG-7) goes through a real Catalog with
// the Assignments among its usage reporters: the blast radius lists every
// binding of the environment, the delete clears exactly those, and the
// scopes they served resolve through what is left (here the instance
// default), not through the deleted environment.
func TestDeleteClearsBindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAsgFixture(t, nil)
	f.set(t, wsBind("ws_1", "acme", "full"))
	f.set(t, projectBind("p_1", "acme", "full"))
	f.set(t, agentBind("agent_1", "globex", "full"))
	f.set(t, wsBind("ws_2", "acme", "lean"))
	f.set(t, defaultBind("host"))

	radius, err := f.cat.BlastRadius(ctx, admin, f.ids["full"])
	if err != nil {
		t.Fatal(err)
	}
	want := []environment.Reference{
		{Kind: "binding", ID: "agent:agent_1", Company: "globex", Detail: `agent agent_1 binding of company "globex", revision 1`},
		{Kind: "binding", ID: "project:p_1", Company: "acme", Detail: `project p_1 binding of company "acme", revision 1`},
		{Kind: "binding", ID: "workspace:ws_1", Company: "acme", Detail: `workspace ws_1 binding of company "acme", revision 1`},
	}
	if d := cmp.Diff(want, radius.Assignments); d != "" {
		t.Errorf("blast radius assignments (-want +got):\n%s", d)
	}
	if !radius.Deletable() {
		t.Fatalf("bindings alone block the delete: %v", radius.Blockers)
	}
	deleted, err := f.cat.Delete(ctx, admin, f.ids["full"], radius.Revision)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if d := cmp.Diff(want, deleted.Assignments); d != "" {
		t.Errorf("delete's radius (-want +got):\n%s", d)
	}
	left, err := f.bindings.ListBindings(ctx, environment.BindingFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var leftIDs []string
	for _, b := range left {
		leftIDs = append(leftIDs, b.BindingRef.ID())
	}
	if d := cmp.Diff([]string{"instance_default", "workspace:ws_2"}, leftIDs); d != "" {
		t.Errorf("bindings after delete (-want +got):\n%s", d)
	}
	res, err := f.asg.Resolve(ctx, admin, fullScope, 0)
	if err != nil {
		t.Fatalf("Resolve after delete: %v", err)
	}
	if res.Binding.Kind != environment.BindingInstanceDefault || res.Environment.ID != f.ids["host"] {
		t.Errorf("after delete %s resolves via %s to %s, want the instance default (host)", fullScope, res.Binding, res.Environment.Name)
	}
}

// TestInstanceDefaultIsProtected (CFG-7): in a catalog built with the
// Assignments, the instance default cannot be deleted and its binding
// stays; once another environment is the default, it can.
func TestInstanceDefaultIsProtected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAsgFixture(t, nil)
	f.set(t, defaultBind("full"))
	_, err := f.cat.Delete(ctx, admin, f.ids["full"], 1)
	var refused *environment.Error
	if !errors.As(err, &refused) {
		t.Fatalf("Delete of the instance default: %v, want a DeleteRefusedError", err)
	}
	wantText(t, err, "instance default")
	if _, err := f.bindings.GetBinding(ctx, environment.BindingRef{Kind: environment.BindingInstanceDefault}); err != nil {
		t.Errorf("refused delete cleared the instance default: %v", err)
	}
	if _, err := environment.Bind(f.asg, ctx, admin, environment.SetBinding{Kind: environment.BindingInstanceDefault,
		EnvironmentID: f.ids["host"], BaseRevision: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.Delete(ctx, admin, f.ids["full"], 1); err != nil {
		t.Errorf("Delete once it is no longer the default: %v", err)
	}
}

// Protected reads with the caller's context: a cancelled BlastRadius is
// refused as protected (never a delete on a guess), and the reason names the
// context's error.
func TestProtectedHonoursTheCallersContext(t *testing.T) {
	t.Parallel()
	f := newAsgFixture(t, nil)
	f.set(t, defaultBind("full"))
	env, err := f.cat.Get(context.Background(), admin, f.ids["host"])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := environment.Protected(f.asg, ctx, &environment.Environment{ID: env.ID, Name: env.Name})
	if !strings.Contains(got, context.Canceled.Error()) {
		t.Errorf("Protected with a cancelled context = %q, want a reason naming %q", got, context.Canceled)
	}
	if got := environment.Protected(f.asg, context.Background(), &environment.Environment{ID: env.ID, Name: env.Name}); got != "" {
		t.Errorf("Protected of a non-default environment = %q, want none", got)
	}
}

// deletingStore deletes environment victim right after the first read of
// it, as a concurrent Catalog.Delete would between Set's check and its
// write.
type deletingStore struct {
	environment.Store
	victim string
	done   bool
}

func (s *deletingStore) GetEnvironment(ctx context.Context, id string) (*environment.Environment, error) {
	env, err := s.Store.GetEnvironment(ctx, id)
	if err == nil && id == s.victim && !s.done {
		s.done = true
		if derr := s.Store.DeleteEnvironment(ctx, id, env.Revision); derr != nil {
			return nil, derr
		}
	}
	return env, err
}

// TestSetRacingDelete (ASG-5): an environment deleted while Set runs leaves
// no binding behind: Set removes what it wrote and fails.
func TestSetRacingDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &deletingStore{Store: environment.NewMemoryStore()}
	f := newAsgFixtureOn(t, store, environment.NewMemoryBindingStore(), nil)
	store.victim = f.ids["full"]
	_, err := environment.Bind(f.asg, ctx, admin, environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme", EnvironmentID: f.ids["full"]})
	wantErr(t, err, errcode.ErrNotFound)
	wantText(t, err, "deleted meanwhile")
	left, err := f.bindings.ListBindings(ctx, environment.BindingFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("a binding outlived its environment: %v", left)
	}
}
