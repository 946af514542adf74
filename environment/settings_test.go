package environment_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/instancehook"
)

// settingsFixture is a catalog and its assignments over memory stores that
// read the instance settings of svc, with a sandbox environment (fake,
// bound as the instance default) and a host environment (local, bound to
// workspace ws_host of acme).
type settingsFixture struct {
	svc     *instance.Service
	cat     *environment.Catalog
	asg     *environment.Assignments
	sandbox string
	host    string
	bare    string // a sandbox driver's that declares no isolation
}

func newSettingsFixture(t *testing.T) *settingsFixture {
	t.Helper()
	ctx := context.Background()
	hs, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
	svc, reader := hs.(*instance.Service), hr.(instance.Reader)
	reg := drivers.NewRegistry(fake.New(&fake.Options{Isolation: drivers.IsolationContainer}), local.New(nil),
		fake.New(&fake.Options{Name: "bare"})) // a sandbox driver that declares no isolation
	envs, bindings := environment.NewMemoryStore(), environment.NewMemoryBindingStore()
	opts := &environment.Options{TestMode: true, Settings: reader}
	f := &settingsFixture{svc: svc}
	f.asg = environment.NewAssignments(bindings, envs, reg, opts)
	f.cat = environment.NewCatalog(envs, reg, environment.NewMemorySecretStore(), f.asg, opts)
	for name, driver := range map[string]string{"sandbox": "fake", "host": "local", "bare": "bare"} {
		v, err := f.cat.Create(ctx, admin, environment.CreateRequest{Name: name, Driver: driver})
		if err != nil {
			t.Fatalf("Create(%s): %v", name, err)
		}
		switch name {
		case "sandbox":
			f.sandbox = v.ID
		case "host":
			f.host = v.ID
		default:
			f.bare = v.ID
		}
	}
	for _, b := range []environment.SetBinding{
		{Kind: environment.BindingInstanceDefault, EnvironmentID: f.sandbox},
		{Kind: environment.BindingWorkspace, Key: "ws_host", Company: "acme", EnvironmentID: f.host},
	} {
		if _, err := environment.Bind(f.asg, ctx, admin, b); err != nil {
			t.Fatalf("Set(%v): %v", b, err)
		}
	}
	return f
}

func (f *settingsFixture) set(t *testing.T, enable, managed bool) {
	t.Helper()
	if _, err := f.svc.Update(context.Background(), admin, instance.AnyRevision, func(c *instance.Settings) error {
		c.EnableEnvironments, c.ManagedSandboxOnly = enable, managed
		return nil
	}); err != nil {
		t.Fatalf("settings update: %v", err)
	}
}

var (
	sandboxScope = authz.Scope{Company: "acme", Workspace: "ws_other"}
	hostScope    = authz.Scope{Company: "acme", Workspace: "ws_host"}
)

// wantRefused checks err is the settings' refusal: the sentinel, the
// unavailable code (also drivers.ErrUnavailable) and the setting named.
func wantRefused(t *testing.T, what string, err, sentinel error, setting string) {
	t.Helper()
	if !errors.Is(err, sentinel) || !errors.Is(err, drivers.ErrUnavailable) || errcode.Code(err) != errcode.Unavailable {
		t.Errorf("%s = %v, want %v (unavailable)", what, err, sentinel)
		return
	}
	if !strings.Contains(err.Error(), setting) {
		t.Errorf("%s: %q does not name the setting %s", what, err, setting)
	}
}

// CFG-9: never written, the settings change nothing: both environments
// resolve and lease.
func TestDefaultSettingsRefuseNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSettingsFixture(t)
	for _, sc := range []authz.Scope{sandboxScope, hostScope} {
		if _, err := f.asg.Resolve(ctx, admin, sc, 0); err != nil {
			t.Errorf("Resolve(%s): %v", sc, err)
		}
	}
	for _, id := range []string{f.sandbox, f.host} {
		if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: id, Company: "acme"}); err != nil {
			t.Errorf("LeaseTarget(%s): %v", id, err)
		}
		v, err := f.cat.Get(ctx, admin, id)
		if err != nil || v.Unavailable != "" {
			t.Errorf("Get(%s) = %+v, %v; want available", id, v, err)
		}
	}
	if err := f.asg.AdmitDraft(ctx, admin, "local", "acme"); err != nil {
		t.Errorf("AdmitDraft(local): %v", err)
	}
}

// CFG-9: with environments disabled, nothing becomes a working target:
// resolution, lease targets (by id and by scope) and drafts refuse naming
// the setting, while catalog reads and edits and binding edits go on; once
// enabled again, everything resolves (the same-process update is seen at
// once).
func TestDisabledEnvironmentsRefuseResolutionAndLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSettingsFixture(t)
	f.set(t, false, false)

	for _, sc := range []authz.Scope{sandboxScope, hostScope} {
		_, err := f.asg.Resolve(ctx, admin, sc, 0)
		wantRefused(t, "Resolve("+sc.String()+")", err, instance.ErrEnvironmentsDisabled, "enableEnvironments")
		_, err = environment.LeaseTargetFor(f.asg, ctx, agent, environment.LeaseTargetRequest{Scope: &sc})
		wantRefused(t, "LeaseTarget(scope "+sc.String()+")", err, instance.ErrEnvironmentsDisabled, "enableEnvironments")
	}
	for _, id := range []string{f.sandbox, f.host} {
		_, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: id, Company: "acme"})
		wantRefused(t, "LeaseTarget("+id+")", err, instance.ErrEnvironmentsDisabled, "enableEnvironments")
	}
	for _, d := range []string{"fake", "local"} {
		wantRefused(t, "AdmitDraft("+d+")", f.asg.AdmitDraft(ctx, admin, d, "acme"), instance.ErrEnvironmentsDisabled, "enableEnvironments")
	}
	// A principal who may not probe is still denied first.
	if err := f.asg.AdmitDraft(ctx, agent, "fake", "acme"); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("AdmitDraft as an agent = %v, want ErrDenied", err)
	}

	// Catalog reads and edits, and binding edits, go on.
	vs, err := f.cat.List(ctx, board, environment.ListFilter{})
	if err != nil || len(vs) != 3 {
		t.Fatalf("List = %d views, %v", len(vs), err)
	}
	for _, v := range vs {
		if !strings.Contains(v.Unavailable, "enableEnvironments") {
			t.Errorf("view of %s: Unavailable = %q, want the setting named", v.Name, v.Unavailable)
		}
	}
	created, err := f.cat.Create(ctx, admin, environment.CreateRequest{Name: "another", Driver: "fake"})
	if err != nil {
		t.Fatalf("Create while disabled: %v", err)
	}
	desc := "edited while environments are disabled"
	if _, err := f.cat.Update(ctx, admin, created.ID, environment.UpdateRequest{BaseRevision: 1, Description: &desc}); err != nil {
		t.Errorf("Update while disabled: %v", err)
	}
	if _, err := f.cat.Archive(ctx, admin, created.ID, 2); err != nil {
		t.Errorf("Archive while disabled: %v", err)
	}
	if _, err := environment.Bind(f.asg, ctx, admin, environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_new", Company: "acme", EnvironmentID: f.sandbox}); err != nil {
		t.Errorf("Set binding while disabled: %v", err)
	}

	f.set(t, true, false)
	if _, err := f.asg.Resolve(ctx, admin, sandboxScope, 0); err != nil {
		t.Errorf("Resolve after enabling: %v", err)
	}
	if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.host, Company: "acme"}); err != nil {
		t.Errorf("LeaseTarget(host) after enabling: %v", err)
	}
}

// CFG-9, CAP-3: with managed-sandbox-only on, host drivers are unavailable
// with the reason managed_sandbox_only wherever the gate decides
// (resolution, lease targets, drafts, the views' availability), sandbox
// drivers are not, and saved host environments stay readable.
func TestManagedSandboxOnlyRefusesHostDrivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSettingsFixture(t)
	f.set(t, true, true)

	_, err := f.asg.Resolve(ctx, admin, hostScope, 0)
	wantRefused(t, "Resolve(host scope)", err, instance.ErrManagedSandboxOnly, "managed_sandbox_only")
	var be *environment.Error
	if !errors.As(err, &be) || be.Binding.Key != "ws_host" {
		t.Errorf("Resolve(host scope) = %v, want a BindingError naming the workspace binding", err)
	}
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.host, Company: "acme"})
	wantRefused(t, "LeaseTarget(host)", err, instance.ErrManagedSandboxOnly, "managed_sandbox_only")
	var ue *environment.Error
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "managed_sandbox_only") {
		t.Errorf("LeaseTarget(host) = %v, want an UnusableError whose reason says managed_sandbox_only", err)
	}
	wantRefused(t, "AdmitDraft(local)", f.asg.AdmitDraft(ctx, admin, "local", "acme"), instance.ErrManagedSandboxOnly, "managed_sandbox_only")

	// Sandbox drivers go on.
	if res, err := f.asg.Resolve(ctx, admin, sandboxScope, 0); err != nil || res.Environment.ID != f.sandbox {
		t.Errorf("Resolve(sandbox scope) = %v, %v", res, err)
	}
	if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.sandbox, Company: "acme"}); err != nil {
		t.Errorf("LeaseTarget(sandbox): %v", err)
	}
	if err := f.asg.AdmitDraft(ctx, admin, "fake", "acme"); err != nil {
		t.Errorf("AdmitDraft(fake): %v", err)
	}

	// The host environment stays readable, marked unavailable with the
	// reason; the sandbox is not marked.
	for _, p := range []authz.Principal{admin, board} {
		v, err := f.cat.Get(ctx, p, f.host)
		if err != nil {
			t.Fatalf("Get(host) as %s: %v", p, err)
		}
		if !strings.Contains(v.Unavailable, "managed_sandbox_only") {
			t.Errorf("Get(host) as %s: Unavailable = %q, want managed_sandbox_only", p, v.Unavailable)
		}
		if v, err := f.cat.Get(ctx, p, f.sandbox); err != nil || v.Unavailable != "" {
			t.Errorf("Get(sandbox) as %s = %q, %v; want available", p, v.Unavailable, err)
		}
	}
	desc := "still editable"
	if _, err := f.cat.Update(ctx, admin, f.host, environment.UpdateRequest{BaseRevision: 1, Description: &desc}); err != nil {
		t.Errorf("Update(host): %v", err)
	}
}

// Issue 56, item 4: managed-sandbox-only means a minimum isolation of
// container for every principal. A sandbox driver that declares none is
// refused wherever the gate decides (resolution, lease targets, drafts,
// the view) with isolation_below_minimum naming the target, its level,
// the minimum and enableManagedSandboxOnly, while a host driver keeps
// its own reason (managed_sandbox_only); with minimumIsolation gvisor as
// well, the stronger minimum is in force and names its setting.
func TestManagedSandboxOnlyMeansContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSettingsFixture(t)
	if _, err := environment.Bind(f.asg, ctx, admin, environment.SetBinding{Kind: environment.BindingWorkspace, Key: "ws_bare", Company: "acme", EnvironmentID: f.bare}); err != nil {
		t.Fatal(err)
	}
	if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.bare, Company: "acme"}); err != nil {
		t.Fatalf("LeaseTarget(bare) before the setting: %v", err)
	}
	f.set(t, true, true)
	below := func(what string, err error, wants ...string) {
		t.Helper()
		if errcode.ReasonOf(err) != "isolation_below_minimum" || !errors.Is(err, drivers.ErrUnavailable) || errors.Is(err, instance.ErrManagedSandboxOnly) {
			t.Errorf("%s = %v (reason %q), want isolation_below_minimum", what, err, errcode.ReasonOf(err))
			return
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", what, err, w)
			}
		}
	}
	_, err := f.asg.Resolve(ctx, admin, authz.Scope{Company: "acme", Workspace: "ws_bare"}, 0)
	below("Resolve(bare scope)", err, "isolation none", "minimum container", "enableManagedSandboxOnly")
	_, err = environment.LeaseTargetFor(f.asg, ctx, agent, environment.LeaseTargetRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws_bare"}})
	below("LeaseTarget(bare scope) as an agent", err, `"bare"`, "isolation none", "minimum container", "enableManagedSandboxOnly")
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.bare, Company: "acme"})
	below("LeaseTarget(bare)", err, `"bare"`, "isolation none", "minimum container", "enableManagedSandboxOnly")
	below("AdmitDraft(bare)", f.asg.AdmitDraft(ctx, admin, "bare", "acme"), "driver bare", "enableManagedSandboxOnly")
	v, err := f.cat.Get(ctx, board, f.bare)
	if err != nil || !strings.Contains(v.Unavailable, "minimum container") || !strings.Contains(v.Unavailable, `Environment "bare"`) {
		t.Errorf("Get(bare) = %q, %v; want marked below the minimum container", v.Unavailable, err)
	}
	// The host keeps managed_sandbox_only; the container sandbox goes on.
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.host, Company: "acme"})
	wantRefused(t, "LeaseTarget(host)", err, instance.ErrManagedSandboxOnly, "managed_sandbox_only")
	if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.sandbox, Company: "acme"}); err != nil {
		t.Errorf("LeaseTarget(sandbox, container): %v", err)
	}

	// The stronger minimum: gvisor set by minimumIsolation.
	if _, err := f.svc.Update(ctx, admin, instance.AnyRevision, func(c *instance.Settings) error {
		c.MinimumIsolation = drivers.IsolationGVisor
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.sandbox, Company: "acme"})
	below("LeaseTarget(sandbox) under gvisor and managed-only", err, "isolation container", "minimum gvisor", "minimumIsolation")
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.bare, Company: "acme"})
	below("LeaseTarget(bare) under gvisor and managed-only", err, "minimum gvisor", "minimumIsolation")
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.host, Company: "acme"})
	wantRefused(t, "LeaseTarget(host) under gvisor and managed-only", err, instance.ErrManagedSandboxOnly, "managed_sandbox_only")

	// Managed-only off, minimum none: the bare sandbox is a target again.
	if _, err := f.svc.Update(ctx, admin, instance.AnyRevision, func(c *instance.Settings) error {
		c.MinimumIsolation, c.ManagedSandboxOnly = drivers.IsolationNone, false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.bare, Company: "acme"}); err != nil {
		t.Errorf("LeaseTarget(bare) with both settings off: %v", err)
	}
}

// failingSettings is a Reader whose store is down.
type failingSettings struct{}

var errSettingsDown = errors.New("settings store down")

func (failingSettings) Current(context.Context) (instance.Settings, error) {
	return instance.Settings{}, errSettingsDown
}

// A failing settings read is an error of the gate, never "enabled".
func TestGateReturnsAFailingSettingsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := drivers.NewRegistry(fake.New(nil))
	g := environment.NewGate(reg, &environment.Options{TestMode: true, Settings: failingSettings{}})
	env := &environment.Environment{ID: "env_1", Name: "one", Driver: "fake", Status: environment.StatusActive}
	if _, _, err := g.Check(ctx, env, 0); !errors.Is(err, errSettingsDown) {
		t.Errorf("Check = %v, want the settings read's error", err)
	}
	if err := g.Admit(ctx, nil); !errors.Is(err, errSettingsDown) {
		t.Errorf("Admit = %v, want the settings read's error", err)
	}
	// Without a Reader: the defaults.
	g = environment.NewGate(reg, &environment.Options{TestMode: true})
	if _, _, err := g.Check(ctx, env, 0); err != nil {
		t.Errorf("Check without settings: %v", err)
	}
}
