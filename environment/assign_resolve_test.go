package environment_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// fullScope has a workspace, a project and an agent of company acme.
var fullScope = authz.Scope{Company: "acme", Workspace: "ws_1", Project: "p_1", Agent: "agent_1"}

// allFour binds every level of fullScope to a different usable environment.
var allFour = []bind{
	wsBind("ws_1", "acme", "full"), projectBind("p_1", "acme", "lean"),
	agentBind("agent_1", "acme", "host"), defaultBind("host"),
}

// TestResolvePrecedence (ASG-1): workspace, then project, then agent
// default, then instance default; the result says which binding won.
func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		bindings []bind
		scope    authz.Scope
		required drivers.Set
		wantRef  environment.BindingRef
		wantEnv  string
	}{
		{
			name: "workspace binding beats project, agent and instance default", bindings: allFour,
			scope: fullScope, wantRef: wsBind("ws_1", "acme", "").ref(), wantEnv: "full",
		},
		{
			name: "project binding wins when the workspace has none", bindings: allFour[1:],
			scope: fullScope, wantRef: projectBind("p_1", "acme", "").ref(), wantEnv: "lean",
		},
		{
			name: "agent default wins when workspace and project have none", bindings: allFour[2:],
			scope: fullScope, wantRef: agentBind("agent_1", "acme", "").ref(), wantEnv: "host",
		},
		{
			name: "instance default applies when nothing else is bound", bindings: []bind{defaultBind("full")},
			scope: fullScope, wantRef: defaultBind("").ref(), wantEnv: "full",
		},
		{
			name: "instance default applies to every company", bindings: []bind{defaultBind("full")},
			scope:   authz.Scope{Company: "globex", Workspace: "ws_9"},
			wantRef: defaultBind("").ref(), wantEnv: "full",
		},
		{
			name:     "a scope without a workspace skips the workspace level",
			bindings: allFour, scope: authz.Scope{Company: "acme", Project: "p_1", Agent: "agent_1"},
			wantRef: projectBind("p_1", "acme", "").ref(), wantEnv: "lean",
		},
		{
			name:     "bindings of other workspaces and projects do not apply",
			bindings: []bind{wsBind("ws_2", "acme", "lean"), projectBind("p_2", "acme", "lean"), agentBind("agent_1", "acme", "full")},
			scope:    fullScope, wantRef: agentBind("agent_1", "acme", "").ref(), wantEnv: "full",
		},
		{
			name:     "a target covering the required capabilities resolves (CAP-4)",
			bindings: []bind{wsBind("ws_1", "acme", "full")}, scope: fullScope,
			required: drivers.NewSet(drivers.CapReuse, drivers.CapTerminal, drivers.CapExec),
			wantRef:  wsBind("ws_1", "acme", "").ref(), wantEnv: "full",
		},
		{
			name:     "a workspace binding of another company does not apply: the key is that company's (ASG-3)",
			bindings: []bind{wsBind("ws_1", "globex", "lean"), projectBind("p_1", "acme", "full")},
			scope:    fullScope, wantRef: projectBind("p_1", "acme", "").ref(), wantEnv: "full",
		},
		{
			name:     "an agent default of another company does not apply (ASG-3)",
			bindings: []bind{agentBind("agent_1", "globex", "lean"), defaultBind("full")},
			scope:    fullScope, wantRef: defaultBind("").ref(), wantEnv: "full",
		},
		{
			name:     "the local host resolves when it is bound and capable",
			bindings: []bind{projectBind("p_1", "acme", "host")}, scope: fullScope,
			required: drivers.NewSet(drivers.CapStreamExec),
			wantRef:  projectBind("p_1", "acme", "").ref(), wantEnv: "host",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newAsgFixture(t, nil)
			f.put(t, tc.bindings...)
			res, err := f.asg.Resolve(context.Background(), admin, tc.scope, tc.required)
			if err != nil {
				t.Fatalf("Resolve(%s): %v", tc.scope, err)
			}
			got := struct {
				Ref     environment.BindingRef
				Env     string
				Company string
			}{res.Binding.BindingRef, res.Environment.ID, res.Scope.Company}
			want := got
			want.Ref, want.Env, want.Company = tc.wantRef, f.ids[tc.wantEnv], tc.scope.Company
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("resolution mismatch (-want +got):\n%s", d)
			}
			if res.Binding.EnvironmentID != res.Environment.ID {
				t.Errorf("binding points at %s, resolution environment is %s", res.Binding.EnvironmentID, res.Environment.ID)
			}
			if len(res.Capabilities.Missing(tc.required)) != 0 || res.Required != tc.required {
				t.Errorf("capabilities %s, required %s: want a set covering %s", res.Capabilities, res.Required, tc.required)
			}
			if err := res.CheckLease(res.Environment.ID, tc.scope.Company); err != nil {
				t.Errorf("CheckLease of the resolved target: %v", err)
			}
		})
	}
}

// TestResolveRefusals (ASG-2, ASG-3, CAP-3, CAP-4, CFG-4): a winning binding
// that cannot be used is an error naming that binding; resolution never
// falls through to a weaker binding and never substitutes the local host,
// even when the host or another usable target is bound below it.
func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		bindings []bind
		scope    authz.Scope
		required drivers.Set
		strict   bool // resolve with test mode off
		wantErr  []error
		// wantRef is the binding the error must name (a *BindingError);
		// nil for errors that are not about one binding.
		wantRef     *environment.BindingRef
		wantText    []string
		wantMissing []drivers.Capability
	}{
		{
			name:     "nothing bound is an error, not the host",
			bindings: nil, scope: fullScope,
			wantErr:  []error{environment.ErrNoBinding, errcode.ErrNotFound},
			wantText: []string{`company "acme"`, "workspace ws_1", "no workspace, project or agent binding and no instance default"},
		},
		{
			name:     "nothing bound for this scope is an error even when other scopes are bound",
			bindings: []bind{wsBind("ws_2", "acme", "host"), agentBind("agent_2", "acme", "host")},
			scope:    fullScope,
			wantErr:  []error{environment.ErrNoBinding},
		},
		{
			name:     "archived workspace target is an error; the project binding is not used",
			bindings: []bind{wsBind("ws_1", "acme", "old"), projectBind("p_1", "acme", "full"), defaultBind("host")},
			scope:    fullScope, wantErr: []error{environment.ErrArchived},
			wantRef: ref(wsBind("ws_1", "acme", "")), wantText: []string{"workspace ws_1 binding", `"old"`, "archived"},
		},
		{
			name:     "deleted project target is an error; the agent default is not used",
			bindings: []bind{projectBind("p_1", "acme", "missing"), agentBind("agent_1", "acme", "full")},
			scope:    fullScope, wantErr: []error{errcode.ErrNotFound},
			wantRef: ref(projectBind("p_1", "acme", "")), wantText: []string{"project p_1 binding", "env_missing", "no longer exists"},
		},
		{
			name:     "deleted instance default is an error, not the host",
			bindings: []bind{defaultBind("missing")}, scope: fullScope,
			wantErr: []error{errcode.ErrNotFound}, wantRef: ref(defaultBind("")),
			wantText: []string{"instance default binding", "env_missing"},
		},
		{
			name:     "unregistered driver is unavailable (CAP-3)",
			bindings: []bind{wsBind("ws_1", "acme", "retired"), defaultBind("host")},
			scope:    fullScope, wantErr: []error{drivers.ErrUnavailable},
			wantRef: ref(wsBind("ws_1", "acme", "")), wantText: []string{`driver "retired" is not registered`},
		},
		{
			name:     "unavailable provider is refused (CAP-3)",
			bindings: []bind{agentBind("agent_1", "acme", "down"), defaultBind("host")},
			scope:    fullScope, wantErr: []error{drivers.ErrUnavailable},
			wantRef: ref(agentBind("agent_1", "acme", "")), wantText: []string{"agent agent_1 binding", "provider unavailable", errProviderDisabled.Error()},
		},
		{
			name:     "test driver outside test mode is refused (CFG-4)",
			bindings: []bind{wsBind("ws_1", "acme", "full"), defaultBind("host")},
			scope:    fullScope, strict: true, wantErr: []error{drivers.ErrUnavailable},
			wantRef: ref(wsBind("ws_1", "acme", "")), wantText: []string{`driver "fake" is for tests only`},
		},
		{
			name:     "missing capabilities are refused and named (CAP-4)",
			bindings: []bind{wsBind("ws_1", "acme", "lean"), defaultBind("full")},
			scope:    fullScope, required: drivers.NewSet(drivers.CapExec, drivers.CapReuse, drivers.CapTerminal),
			wantErr: []error{drivers.ErrUnsupported}, wantRef: ref(wsBind("ws_1", "acme", "")),
			wantText:    []string{"lacks required capability reuse, terminal"},
			wantMissing: []drivers.Capability{drivers.CapReuse, drivers.CapTerminal},
		},
		{
			name:     "the bound local host lacking a capability is refused like any target",
			bindings: []bind{defaultBind("host")}, scope: fullScope,
			required: drivers.NewSet(drivers.CapReuse),
			wantErr:  []error{drivers.ErrUnsupported}, wantRef: ref(defaultBind("")),
			wantText: []string{`driver "local" lacks required capability reuse`}, wantMissing: []drivers.Capability{drivers.CapReuse},
		},
		{
			name:     "a stored config the driver no longer accepts is refused (CFG-8)",
			bindings: []bind{projectBind("p_1", "acme", "broken"), defaultBind("full")},
			scope:    fullScope, wantErr: []error{config.ErrInvalid, errcode.ErrInvalid},
			wantRef: ref(projectBind("p_1", "acme", "")), wantText: []string{`"broken"`, "cpus"},
		},
		{
			name:     "a scope without a company is invalid",
			bindings: []bind{defaultBind("full")}, scope: authz.Scope{Workspace: "ws_1"},
			wantErr: []error{errcode.ErrInvalid}, wantText: []string{`"company"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newAsgFixture(t, nil)
			f.put(t, tc.bindings...)
			asg := f.asg
			if tc.strict {
				asg = f.strict
			}
			res, err := asg.Resolve(context.Background(), admin, tc.scope, tc.required)
			if err == nil {
				t.Fatalf("Resolve(%s) = %s via %s, want an error", tc.scope, res.Environment.Name, res.Binding)
			}
			if res != nil {
				t.Errorf("Resolve returned a resolution (%s) with its error", res.Environment.Name)
			}
			wantErr(t, err, tc.wantErr...)
			wantText(t, err, tc.wantText...)
			if strings.Contains(err.Error(), "globex") || strings.Contains(err.Error(), f.ids["full"]) && errors.Is(err, errcode.ErrDenied) {
				t.Errorf("refusal %q names another tenant's company or environment (ASG-3)", err)
			}
			if strings.Contains(err.Error(), f.ids["host"]) && !failingBindsTo(tc.bindings, "host", tc.wantRef) {
				t.Errorf("error %q mentions the host environment although the failing binding is not the host", err)
			}
			var be *environment.Error
			if tc.wantRef == nil {
				if errors.As(err, &be) {
					t.Errorf("got a BindingError naming %s, want an error about the scope", be.Binding)
				}
				return
			}
			if !errors.As(err, &be) {
				t.Fatalf("error %q is not a *BindingError", err)
			}
			if be.Binding.BindingRef != *tc.wantRef {
				t.Errorf("error names %s, want %s", be.Binding.BindingRef, *tc.wantRef)
			}
			if !strings.Contains(err.Error(), be.Binding.String()) {
				t.Errorf("error %q does not name the binding %q", err, be.Binding.String())
			}
			if d := cmp.Diff(tc.wantMissing, be.Missing); d != "" {
				t.Errorf("missing capabilities (-want +got):\n%s", d)
			}
		})
	}
}

func ref(b bind) *environment.BindingRef { r := b.ref(); return &r }

// failingBindsTo reports whether the failing binding itself points at env.
func failingBindsTo(bs []bind, env string, failing *environment.BindingRef) bool {
	for _, b := range bs {
		if failing != nil && b.ref() == *failing && b.env == env {
			return true
		}
	}
	return false
}

// failingBindings is a BindingStore whose reads fail for one kind.
type failingBindings struct {
	environment.BindingStore
	kind environment.BindingKind
}

var errBindingStoreDown = errors.New("binding store down")

func (s failingBindings) GetBinding(ctx context.Context, r environment.BindingRef) (*environment.Binding, error) {
	if r.Kind == s.kind {
		return nil, errBindingStoreDown
	}
	return s.BindingStore.GetBinding(ctx, r)
}

// TestResolveStoreErrorIsNotSkipped (ASG-2): a binding that cannot be read
// is an error, not a reason to try the weaker levels.
func TestResolveStoreErrorIsNotSkipped(t *testing.T) {
	t.Parallel()
	mem := environment.NewMemoryBindingStore()
	f := newAsgFixtureOn(t, environment.NewMemoryStore(), failingBindings{mem, environment.BindingProject}, nil)
	f.put(t, projectBind("p_1", "acme", "full"), defaultBind("host"))
	_, err := f.asg.Resolve(context.Background(), admin, fullScope, 0)
	wantErr(t, err, errBindingStoreDown)
	wantText(t, err, "project p_1")
}

// TestResolutionCheckLease (ASG-4): a lease is used for a resolution only when
// it is of the resolved environment and company; anything else is an error
// naming both sides, never a guess.
func TestResolutionCheckLease(t *testing.T) {
	t.Parallel()
	res := &environment.Resolution{
		Scope:       authz.Scope{Company: "acme", Workspace: "ws_1"},
		Binding:     environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme"}, EnvironmentID: "env_1"},
		Environment: &environment.Environment{ID: "env_1", Name: "full"},
	}
	noCompany := *res
	noCompany.Scope.Company = ""
	tests := []struct {
		name       string
		res        *environment.Resolution
		env, comp  string
		wantOK     bool
		wantInText []string
	}{
		{name: "lease of the resolved environment and company matches", res: res, env: "env_1", comp: "acme", wantOK: true},
		{name: "lease of another environment is a mismatch", res: res, env: "env_2", comp: "acme",
			wantInText: []string{"workspace ws_1 binding", `environment "env_2"`, `"full" (env_1)`}},
		{name: "lease of another company is a mismatch", res: res, env: "env_1", comp: "globex",
			wantInText: []string{`company "globex"`, `company "acme"`}},
		{name: "lease without an environment is a mismatch, not a guess", res: res, env: "", comp: "acme"},
		{name: "lease without a company is a mismatch, not a guess", res: res, env: "env_1", comp: ""},
		{name: "a resolution without a company matches nothing", res: &noCompany, env: "env_1", comp: ""},
		{name: "no resolution matches nothing", res: nil, env: "env_1", comp: "acme", wantInText: []string{"without a resolution"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.res.CheckLease(tc.env, tc.comp)
			if tc.wantOK {
				if err != nil {
					t.Fatalf("CheckLeaseTarget: %v", err)
				}
				return
			}
			wantErr(t, err, environment.ErrTargetMismatch, errcode.ErrConflict)
			wantText(t, err, append([]string{"ASG-4"}, tc.wantInText...)...)
		})
	}
}

// TestResolveThenLeaseMismatch (ASG-4) runs the check on a real resolution:
// the lease layer's view of a lease of another environment is refused.
func TestResolveThenLeaseMismatch(t *testing.T) {
	t.Parallel()
	f := newAsgFixture(t, nil)
	f.put(t, wsBind("ws_1", "acme", "full"))
	res, err := f.asg.Resolve(context.Background(), admin, fullScope, drivers.NewSet(drivers.CapReuse))
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, res.CheckLease(f.ids["lean"], "acme"), environment.ErrTargetMismatch)
	if err := res.CheckLease(f.ids["full"], "acme"); err != nil {
		t.Errorf("lease of the resolved environment refused: %v", err)
	}
}
