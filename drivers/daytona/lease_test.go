package daytona_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// LEASE-4, LEASE-5 through the lease manager: a Daytona start longer than
// the lease budget fails the acquisition but keeps the recorded sandbox,
// and the next acquisition resumes that same sandbox by id once it has
// started; no second sandbox is created.
func TestSlowStartIsResumedThroughTheLeaseManager(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, envOptions{clk: clk, knobs: daytonafake.Knobs{StartDelay: 2 * time.Minute}})

	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	cfg := e.config(t, e.snap.ID)
	ref, err := secrets.Put(ctx, "env-1", "api_key", cfg.String("api_key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg["api_key"] = ref
	// The secret env is stored as the catalog would: a reference per value.
	envRef, err := secrets.Put(ctx, "env-1", "env"+".BERTH_SANDBOX", "1")
	if err != nil {
		t.Fatal(err)
	}
	cfg["env"] = map[string]any{"BERTH_SANDBOX": envRef}
	env := &environment.Environment{ID: "env-1", Name: "daytona", Driver: e.drv.Name(), Status: environment.StatusActive, Config: cfg, Revision: 1}
	envs := envhook.NewMemoryStore().(environment.Store)
	if err := envs.CreateEnvironment(ctx, env, false); err != nil {
		t.Fatal(err)
	}
	reg := drivers.NewRegistry(e.drv)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments)
	lstore := lease.NewMemoryStore()
	mgr, _ := leasehook.New(leasehook.Sources{Store: lstore, Drivers: reg, Assignments: asg, Secrets: secrets.Get})
	m := mgr.(*lease.Manager)
	op := authz.Principal{ID: "op", Role: authz.RoleLocalOperator}
	req := lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: "run-1", Policy: lease.ReuseByEnvironment, Budget: 2 * time.Second}

	if _, err := m.Acquire(ctx, op, req); err == nil {
		t.Fatal("an acquisition whose start outlasts its budget succeeded")
	}
	ls, err := lstore.ListLeases(ctx, lease.Filter{Environment: env.ID})
	if err != nil || len(ls) != 1 || ls[0].ProviderLeaseID == "" {
		t.Fatalf("after the budget ran out: leases %+v, %v; want one record holding the sandbox id", ls, err)
	}
	first := ls[0]

	e.srv.Advance(2 * time.Minute) // the start finishes after the budget
	req.Run, req.Budget = "run-2", 20*time.Second
	h, err := m.Acquire(ctx, op, req)
	if err != nil {
		t.Fatalf("second acquisition: %v", err)
	}
	if !h.Resumed() || h.SandboxID() != first.ProviderLeaseID || h.ID() != first.ID {
		t.Errorf("second acquisition: resumed %v, sandbox %s lease %s; want a resume of %s (lease %s)",
			h.Resumed(), h.SandboxID(), h.ID(), first.ProviderLeaseID, first.ID)
	}
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", `echo "resumed $BERTH_SANDBOX"`}})
	if err != nil || string(res.Stdout) != "resumed 1\n" {
		t.Fatalf("exec in the resumed sandbox: %v %+v", err, res)
	}
	if got := e.srv.Calls(daytonafake.RouteCreateSandbox); got != 1 {
		t.Errorf("%d creates, want 1", got)
	}
	l, err := m.Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Cleanup != "confirmed" {
		t.Fatalf("release: %+v, %v", l, err)
	}
}

// LEASE-9, issue #13 item 1: an orphan sweep over more than one page of
// sandboxes, with toolbox activity on a sandbox of a later page while the
// sweep walks the list (the API's default order is by last activity, with
// the cursor keyed on it), destroys every orphan and leaves the leased
// sandbox alone.
func TestSweepFindsEveryOrphanAcrossPagesWithActivity(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		busy    drivers.Sandbox // an orphan used while the sweep lists
		touched bool
	)
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{PageSize: 2}, afterCall: func(route string, status int) {
		mu.Lock()
		sb := busy
		first := route == daytonafake.RouteListSandboxes && status == 200 && !touched && sb != nil
		touched = touched || first
		mu.Unlock()
		if !first {
			return
		}
		if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}}); err != nil {
			t.Errorf("activity during the sweep: %v", err)
		}
	}})
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	cfg := e.config(t, e.snap.ID)
	ref, err := secrets.Put(ctx, "env-1", "api_key", cfg.String("api_key"))
	if err != nil {
		t.Fatal(err)
	}
	envCfg := cfg.Clone()
	envCfg["api_key"] = ref
	delete(envCfg, "env") // a saved config holds references only
	env := &environment.Environment{ID: "env-1", Name: "daytona", Driver: e.drv.Name(), Status: environment.StatusActive, Config: envCfg, Revision: 1}
	envs := envhook.NewMemoryStore().(environment.Store)
	if err := envs.CreateEnvironment(ctx, env, false); err != nil {
		t.Fatal(err)
	}
	reg := drivers.NewRegistry(e.drv)
	mgr, _ := leasehook.New(leasehook.Sources{Store: lease.NewMemoryStore(), Drivers: reg,
		Assignments: envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments), Secrets: secrets.Get,
		SweepEnvironments: func(context.Context) ([]*environment.Environment, error) { return []*environment.Environment{env}, nil }})
	m := mgr.(*lease.Manager)
	op := authz.Principal{ID: "op", Role: authz.RoleLocalOperator}
	var orphans []drivers.Sandbox
	for range 5 {
		sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: map[string]string{
			"berth.instance": "berth", "berth.environment": env.ID,
		}})
		if err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, sb)
	}
	h, err := m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: "run-1", Budget: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	busy = orphans[0] // the least recently active: on the last page
	mu.Unlock()

	rep, err := m.Sweep(ctx, op)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	mu.Lock()
	if !touched {
		t.Error("no activity happened during the sweep's listing")
	}
	mu.Unlock()
	if rep.OrphansDestroyed != len(orphans) || rep.OrphansFailed != 0 {
		t.Errorf("sweep report %+v: want %d orphans destroyed", rep, len(orphans))
	}
	for _, o := range orphans {
		if v, ok := e.srv.Sandbox(o.ID()); ok && v.State != "destroyed" && v.DesiredState != "destroyed" {
			t.Errorf("orphan %s survived the sweep: %+v", o.ID(), v)
		}
	}
	if v, _ := e.srv.Sandbox(h.SandboxID()); v.State != "started" || v.DesiredState != "started" {
		t.Errorf("the leased sandbox is %s/%s after the sweep, want started", v.State, v.DesiredState)
	}
	if calls := e.srv.Calls(daytonafake.RouteListSandboxes); calls < 3 {
		t.Errorf("%d list pages read, want at least 3 (6 sandboxes, 2 per page)", calls)
	}
}
