package controller_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease"
)

// newPoolWorld is leaseWorld with a runner pool of one member on env-1:
// its members start with the (in-process) runner connected to the world's
// controller, whose session store the test reads.
func newPoolWorld(t *testing.T) (*leaseWorld, controller.Store) {
	t.Helper()
	return newPoolWorldWith(t, leasePolicy, nil, nil)
}

// newPoolWorldWith is newPoolWorld with the controller's Authorizer az
// (the lease manager's stays leasePolicy), SecretResolver secrets and the
// pool setting pool (nil: one member, no max age).
func newPoolWorldWith(t *testing.T, az authz.Authorizer, secrets controller.SecretResolver, pool *environment.Pool) (*leaseWorld, controller.Store) {
	t.Helper()
	w, st, _ := newPoolReplicas(t, az, secrets, pool)
	return w, st
}

// newPoolReplicas is newPoolWorldWith that also returns the func that
// starts another replica of the world's controller: on the same stores,
// signer and output directory, serving its own HTTP endpoint.
func newPoolReplicas(t *testing.T, az authz.Authorizer, secrets controller.SecretResolver, pool *environment.Pool) (*leaseWorld, controller.Store, func() *server) {
	t.Helper()
	leases := lease.NewMemoryStore()
	st := controller.NewMemoryStore()
	o := serverOptions{Options: controller.Options{Authorizer: az, Store: st, DataDir: t.TempDir()}, Leases: leases, Secrets: secrets}
	s := newServer(t, o)
	replica := func() *server { return newServer(t, o) }
	fk := fake.New(nil)
	cfg, err := fk.Schema().Normalize(map[string]any{"region": "local-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	envs := envhook.NewMemoryStore().(environment.Store)
	env := &environment.Environment{ID: "env-1", Name: "pooled", Driver: "fake", Status: environment.StatusActive, Config: cfg, Revision: 1,
		Pool: pool}
	if pool == nil {
		env.Pool = &environment.Pool{Size: 1, Runner: true}
	}
	if err := envs.CreateEnvironment(ctx, env, false); err != nil {
		t.Fatal(err)
	}
	reg := drivers.NewRegistry(fk)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, &envhook.Options{TestMode: true, Authorizer: leasePolicy}).(*environment.Assignments)
	var n atomic.Int64
	lo := &lease.Options{InstanceID: "test", ManualPoolRefill: true}
	leasehook.Tune(lo, func(k *leasetune.Knobs) {
		k.NewID = func() string { return "lease-" + string(rune('0'+n.Add(1))) }
	})
	mgr, _ := leasehook.New(leasehook.Sources{Store: leases, Drivers: reg, Assignments: asg, Tasks: s.tasks, Options: lo,
		PoolRunners: func() (*drivers.RunnerSet, error) { return drivers.RunnerSetOf(fakeSpec), nil },
		SweepEnvironments: func(ctx context.Context) ([]*environment.Environment, error) {
			return envs.ListEnvironments(ctx, environment.ListFilter{})
		},
	})
	m := mgr.(*lease.Manager)
	t.Cleanup(func() { leasehook.Close(m) })
	return &leaseWorld{s: s, fk: fk, m: m, leases: leases}, st, replica
}

// Issue 31, runner pools: a member starts with its runner launched and
// connected on a session of the instance that runs no command; the lease
// that adopts the member takes that session over in its Attach (company
// and run), the token is renewed with those claims before any command,
// and the first task runs on the runner that was connected ahead, with no
// relaunch. The session is handed over once; the member serves no second
// lease.
func TestRunnerPoolMemberIsConnectedAheadAndHandedOver(t *testing.T) {
	t.Parallel()
	w, st := newPoolWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := w.m.MaintainPools(ctx, leaseOperator)
	if err != nil || rep.Created != 1 {
		t.Fatalf("MaintainPools = %+v, %v; want one member created", rep, err)
	}
	members, err := st.LeaseSessions(ctx, "lease-1")
	if err != nil || len(members) != 1 {
		t.Fatalf("sessions of the member: %+v, %v; want one", members, err)
	}
	pool := members[0]
	if pool.Company != authz.InstanceCompany || pool.Run != prp.PoolRunPrefix+"lease-1" || !pool.Holder || pool.Scope != prp.ScopeTask || !w.s.c.Connected(pool.ID) {
		t.Fatalf("the member's session %+v (connected %t): want the instance's, run %slease-1, the holder's, connected", pool, w.s.c.Connected(pool.ID), prp.PoolRunPrefix)
	}

	// Before adoption the session runs nothing, whoever asks: not even a
	// principal every policy allows (the local operator).
	if _, err := w.s.c.StartTask(ctx, leaseOperator, pool.ID, "early", prp.TaskStart{TaskID: "t-early", Argv: []string{"true"}}); !errors.Is(err, prp.ErrScopeDenied) {
		t.Errorf("a task on the pool member's session: %v, want ErrScopeDenied", err)
	}
	if _, _, err := w.s.c.MintTicket(ctx, leaseOperator, controller.TicketRequest{Lease: "lease-1", Run: "run-x", Scope: prp.ScopeTask}); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("a ticket for the pool member: %v, want errcode.ErrConflict", err)
	}
	if n, _ := st.CommandsAfter(ctx, pool.ID, 0, 0); len(n) != 0 {
		t.Errorf("commands journaled on the pool session: %d, want 0", len(n))
	}

	h := w.acquire(t)
	if h.ID() != "lease-1" {
		t.Fatalf("acquired %s, want the member lease-1 adopted", h.ID())
	}
	var stages []controller.AttachStage
	att, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{Progress: func(s controller.AttachStage) { stages = append(stages, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if att.Session() != pool.ID || att.Run() != "run-1" || att.Company() != "co-1" {
		t.Errorf("attachment session %s run %s company %s; want the member's session %s for run-1 of co-1", att.Session(), att.Run(), att.Company(), pool.ID)
	}
	if got := strings.Join(toStrings(stages), ","); got != "installing,connected" {
		t.Errorf("attach stages %s, want installing,connected (no launch: the runner was connected ahead)", got)
	}
	s, err := st.GetSession(ctx, pool.ID)
	if err != nil || s.Company != "co-1" || s.Run != "run-1" || !s.Holder {
		t.Errorf("the session after the hand-over: %+v, %v; want co-1's, run-1, the holder's", s, err)
	}
	var out bytes.Buffer
	task, err := att.Start(ctx, leaseOperator, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"echo", "from the pool"}}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := task.Wait(ctx)
	if err != nil || exit.Code != 0 || out.String() != "from the pool\n" {
		t.Fatalf("the first task: exit %+v, %v, output %q; want 0 and its output", exit, err, out.String())
	}
	if n := w.s.c.Handovers(); n != 1 {
		t.Errorf("%d token renewals for a hand-over, want 1", n)
	}
	if ok, err := st.HandOverSession(ctx, pool.ID, "co-2", "run-2"); err != nil || ok {
		t.Errorf("a second hand-over: %t, %v; want false", ok, err)
	}
	// Another company's principal cannot use the session now.
	if _, err := w.s.c.StartTask(ctx, stranger, pool.ID, "steal", prp.TaskStart{TaskID: "t-steal", Argv: []string{"true"}}); err == nil {
		t.Error("a stranger started a task on the adopted session")
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	// The member served one lease: the next acquisition gets another.
	h2 := w.acquire(t)
	if h2.ID() == "lease-1" {
		t.Error("the released member was adopted again")
	}
	if _, err := h2.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}

// A pool member's runner that was disconnected when its session was
// handed over (its host crashed right after the hand-over, say) reconnects
// with the pool token it holds: the controller accepts it for the handed
// session, and the writer renews its token with the lease's claims before
// any command, so the adopting lease's task runs on it.
func TestRunnerPoolMemberReconnectsAfterTheHandOver(t *testing.T) {
	t.Parallel()
	w, st := newPoolWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if rep, err := w.m.MaintainPools(ctx, leaseOperator); err != nil || rep.Created != 1 {
		t.Fatalf("MaintainPools = %+v, %v", rep, err)
	}
	ss, err := st.LeaseSessions(ctx, "lease-1")
	if err != nil || len(ss) != 1 {
		t.Fatalf("sessions %+v, %v", ss, err)
	}
	pool := ss[0].ID
	h := w.acquire(t)
	if h.ID() != "lease-1" {
		t.Fatalf("acquired %s, want the member", h.ID())
	}
	if ok, err := w.s.c.Disconnect(ctx, leaseOperator, pool); err != nil || !ok {
		t.Fatalf("Disconnect = %t, %v", ok, err)
	}
	if ok, err := st.HandOverSession(ctx, pool, "co-1", "run-1"); err != nil || !ok {
		t.Fatalf("HandOverSession = %t, %v", ok, err)
	}
	deadline := time.Now().Add(time.Minute)
	for !w.s.c.Connected(pool) {
		if time.Now().After(deadline) {
			t.Fatal("the member's runner did not reconnect with its pool token")
		}
		time.Sleep(10 * time.Millisecond)
	}
	att, err := w.s.c.Reattach(ctx, operator, pool)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	task, err := att.Start(ctx, operator, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"echo", "reconnected"}}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := task.Wait(ctx); err != nil || exit.Code != 0 || out.String() != "reconnected\n" {
		t.Fatalf("task: %+v, %v, %q", exit, err, out.String())
	}
	if n := w.s.c.Handovers(); n != 1 {
		t.Errorf("%d hand-over renewals, want 1", n)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}
