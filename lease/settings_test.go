package lease_test

import (
	"context"
	"errors"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/instancehook"
	"github.com/berthdev/berth/lease"
)

// withSettings rebuilds w's assignments and manager over a settings
// service and returns it.
func withSettings(w *world) *instance.Service {
	hs, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
	svc, reader := hs.(*instance.Service), hr.(instance.Reader)
	w.asg = envhook.NewAssignments(w.binds, w.envs, w.reg, &envhook.Options{TestMode: true, Settings: reader}).(*environment.Assignments)
	w.m = w.newManager(nil)
	return svc
}

func setSettings(t *testing.T, svc *instance.Service, enable, managed bool) {
	t.Helper()
	if _, err := svc.Update(context.Background(), op, instance.AnyRevision, func(c *instance.Settings) error {
		c.EnableEnvironments, c.ManagedSandboxOnly = enable, managed
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func wantSettingsRefusal(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) || !errors.Is(err, drivers.ErrUnavailable) || errcode.Code(err) != errcode.Unavailable {
		t.Errorf("%s = %v, want %v (unavailable)", what, err, sentinel)
	}
}

// CFG-9: with environments disabled, lease acquisition refuses by id,
// through a scope, for the same run again and for a draft, writing no
// record and creating no sandbox; a lease acquired before is still
// released with proof, and a sweep still expires and destroys; once
// enabled again, acquisition works.
func TestDisabledEnvironmentsRefuseAcquisitionNotReleaseOrSweep(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	w := newWorld(t, worldOpts{})
	svc := withSettings(w)
	if _, err := w.asg.Set(bg, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingInstanceDefault}, EnvironmentID: w.env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	released := w.acquire(lease.Ephemeral, "run-1")
	expiring := w.acquire(lease.Ephemeral, "run-2")
	before, err := w.store.ListLeases(bg, lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	live := len(w.liveSandboxes())

	setSettings(t, svc, false, false)
	agent := authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
	for _, tc := range []struct {
		name string
		p    authz.Principal
		req  lease.AcquireRequest
	}{
		{"by id", op, w.req(lease.Ephemeral, "run-3")},
		{"the same run again", op, w.req(lease.Ephemeral, "run-1")},
		{"reusable by id", op, w.req(lease.ReuseByWorkspace, "")},
		{"through a scope", agent, lease.AcquireRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws"}}},
		{"a draft", op, lease.Draft(lease.AcquireRequest{}, w.fk.Name(), w.env.Config)},
	} {
		h, err := w.m.Acquire(bg, tc.p, tc.req)
		wantSettingsRefusal(t, "Acquire "+tc.name, err, instance.ErrEnvironmentsDisabled)
		if h != nil {
			t.Errorf("Acquire %s returned a handle", tc.name)
		}
	}
	after, err := w.store.ListLeases(bg, lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) || len(w.liveSandboxes()) != live {
		t.Errorf("refused acquisitions left %d lease records (was %d) and %d live sandboxes (was %d)", len(after), len(before), len(w.liveSandboxes()), live)
	}

	// Releases and sweeps go on.
	l, err := w.m.Release(bg, op, released.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Fatalf("Release while disabled = %+v, %v; want released with a confirmed cleanup", l, err)
	}
	if st := w.state(l.ProviderLeaseID); st != drivers.StateDestroyed {
		t.Errorf("the released sandbox is %s", st)
	}
	w.clk.Advance(leaseTTL + claimGrace)
	rep, err := w.m.Sweep(bg, op)
	if err != nil || rep.Expired != 1 {
		t.Errorf("Sweep while disabled = %+v, %v; want the expired lease destroyed", rep, err)
	}
	if got := w.get(expiring.ID()); got.Status != lease.StatusExpired {
		t.Errorf("after the sweep the expired lease is %s", got.Status)
	}
	if n := len(w.liveSandboxes()); n != 0 {
		t.Errorf("%d sandboxes live after release and sweep", n)
	}

	setSettings(t, svc, true, false)
	w.acquire(lease.Ephemeral, "run-4")
}

// CFG-9, CAP-3: with managed-sandbox-only on, a host driver's environment
// (local) is refused at acquisition with managed_sandbox_only, by id and as
// a draft, while a sandbox driver's is leased.
func TestManagedSandboxOnlyRefusesHostLeases(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	w := newWorld(t, worldOpts{fake: &fake.Options{Isolation: drivers.IsolationContainer}})
	w.reg = drivers.NewRegistry(w.fk, local.New(nil))
	svc := withSettings(w)
	host := &environment.Environment{ID: "env-host", Name: "host", Driver: "local", Status: environment.StatusActive, Revision: 1}
	w.save(host)
	setSettings(t, svc, true, true)

	_, err := w.m.Acquire(bg, op, lease.AcquireRequest{Company: "acme", EnvironmentID: host.ID})
	wantSettingsRefusal(t, "Acquire of the host environment", err, instance.ErrManagedSandboxOnly)
	_, err = w.m.Acquire(bg, op, lease.Draft(lease.AcquireRequest{}, "local", config.Config{}))
	wantSettingsRefusal(t, "Acquire of a local draft", err, instance.ErrManagedSandboxOnly)
	if ls, _ := w.store.ListLeases(bg, lease.Filter{}); len(ls) != 0 {
		t.Errorf("refused host acquisitions wrote %d lease records", len(ls))
	}
	h := w.acquire(lease.Ephemeral, "sandbox-run")
	if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}
