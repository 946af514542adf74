package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/internal/sqlstore"
)

// countingFake is the fake provider (the cloud both replicas share) with a
// per-sandbox count of destroy-by-id calls, the only way a manager without
// the live handle cleans up.
type countingFake struct {
	*fake.Driver
	mu       sync.Mutex
	destroys map[string]int
}

func newCountingFake() *countingFake {
	return &countingFake{Driver: fake.New(nil), destroys: map[string]int{}}
}

// Destroy counts the call, then destroys as the fake does.
func (c *countingFake) Destroy(ctx context.Context, cfg config.Config, id string) (drivers.Receipt, error) {
	c.mu.Lock()
	c.destroys[id]++
	c.mu.Unlock()
	return c.Driver.Destroy(ctx, cfg, id)
}

func (c *countingFake) destroyCounts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.destroys))
	for k, v := range c.destroys {
		out[k] = v
	}
	return out
}

// replicas is two host replicas: each with its own *sqlstore.DB (its own
// connection pool) on one PostgreSQL database, and its own lease.Manager,
// sharing one fake provider.
type replicas struct {
	provider *countingFake
	env      *environment.Environment
	managers [2]*lease.Manager
	stores   [2]*sqlstore.DB
	url      string // the database both stores open
}

// sweepLimit is small so that concurrent sweeps interleave their claims.
const sweepLimit = 3

// newReplicas builds two replicas; with noOrphanSearch their sweeps search
// no environment for orphans (leasehook.Sources.SweepEnvironments).
func newReplicas(t *testing.T, noOrphanSearch bool) *replicas {
	t.Helper()
	url := testenv.Postgres(t)
	r := &replicas{provider: newCountingFake(), url: url}
	cfg, err := r.provider.Schema().Normalize(map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	r.env = &environment.Environment{ID: "env-1", Name: "shared", Driver: r.provider.Name(),
		Status: environment.StatusActive, Config: cfg, Revision: 1}
	reg := drivers.NewRegistry(r.provider)
	asg := assignmentsWith(t, reg, r.env)
	for i := range r.managers {
		db, err := sqlstore.Open(context.Background(), url, sqlstore.TestOptions)
		if err != nil {
			t.Fatalf("replica %d: Open: %v", i, err)
		}
		t.Cleanup(func() { db.Close() })
		r.stores[i] = db
		o := &lease.Options{InstanceID: "berth-test"}
		leasehook.Tune(o, func(k *leasetune.Knobs) { k.PollInterval, k.SweepLimit = 5*time.Millisecond, sweepLimit })
		src := leasehook.Sources{Store: db, Drivers: reg, Assignments: asg, Options: o}
		if noOrphanSearch {
			src.SweepEnvironments = func(context.Context) ([]*environment.Environment, error) { return nil, nil }
		}
		mgr, _ := leasehook.New(src)
		r.managers[i] = mgr.(*lease.Manager)
	}
	return r
}

// LEASE-8, LEASE-10: 50 concurrent acquisitions of one reuse key, spread
// over two replicas with separate pools, make exactly one sandbox.
func TestReplicasOneSandboxPerReuseKey(t *testing.T) {
	t.Parallel()
	testenv.Postgres(t) // skip or fail before building anything
	r := newReplicas(t, false)
	ctx := context.Background()
	const n = 50
	var wg sync.WaitGroup
	leaseIDs := make([]string, n)
	pids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			h, err := r.managers[i%2].Acquire(ctx, leaseOperator, lease.AcquireRequest{
				Company: "acme", EnvironmentID: r.env.ID, Workspace: "/w", Run: fmt.Sprintf("run-%d", i),
				Policy: lease.ReuseByEnvironment,
			})
			if err != nil {
				errs[i] = err
				return
			}
			leaseIDs[i], pids[i] = h.ID(), h.Lease().ProviderLeaseID
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("acquisition %d (replica %d): %v", i, i%2, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if got := fakectl.Of(r.provider.Driver).Calls("create"); got != 1 {
		t.Errorf("the provider was asked to create %d sandboxes, want 1", got)
	}
	if sbs := fakectl.Of(r.provider.Driver).Sandboxes(); len(sbs) != 1 {
		t.Errorf("the provider holds %d sandboxes, want 1: %+v", len(sbs), sbs)
	}
	for i := range n {
		if leaseIDs[i] != leaseIDs[0] || pids[i] != pids[0] {
			t.Errorf("acquisition %d got lease %s sandbox %s; acquisition 0 got lease %s sandbox %s",
				i, leaseIDs[i], pids[i], leaseIDs[0], pids[0])
		}
	}
	for i, db := range r.stores {
		ls, err := db.ListLeases(ctx, lease.Filter{Environment: r.env.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) != 1 || ls[0].Status != lease.StatusActive {
			t.Errorf("replica %d sees %d leases, want one active lease: %+v", i, len(ls), ls)
		}
	}
}

// LEASE-10: two replicas sweeping at once process each pending cleanup
// once: every pending lease is claimed by one sweep, its sandbox destroyed
// by exactly one call, and it records exactly one cleanup attempt.
func TestReplicasSweepEachCleanupOnce(t *testing.T) {
	t.Parallel()
	testenv.Postgres(t)
	for _, tc := range []struct {
		name           string
		noOrphanSearch bool
	}{
		// The claim path (Store.ClaimForSweep) alone.
		{name: "pending cleanups", noOrphanSearch: true},
		// With the orphan search too: a sweep may list a sandbox just before
		// the other replica proves its cleanup; it must not destroy it again
		// (lease.Manager.owned treats a listing older than the proof as
		// stale).
		{name: "pending cleanups and orphan search"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testSweepEachCleanupOnce(t, newReplicas(t, tc.noOrphanSearch))
		})
	}
}

func testSweepEachCleanupOnce(t *testing.T, r *replicas) {
	ctx := context.Background()
	const n = 30
	pending := map[string]string{} // lease id -> sandbox id
	for i := range n {
		h, err := r.managers[i%2].Acquire(ctx, leaseOperator, lease.AcquireRequest{
			Company: "acme", EnvironmentID: r.env.ID, Run: fmt.Sprintf("run-%d", i), Policy: lease.Ephemeral,
		})
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		pid := h.Lease().ProviderLeaseID
		fakectl.Of(r.provider.Driver).RefuseStop(pid, nil)
		l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
		if !errors.Is(err, lease.ErrCleanupPending) || l.Status != lease.StatusPendingCleanup {
			t.Fatalf("release %d with a refused destroy: status %s, %v; want pending_cleanup, ErrCleanupPending", i, l.Status, err)
		}
		pending[h.ID()] = pid
	}
	fakectl.Of(r.provider.Driver).ClearFaults()
	if got := r.provider.destroyCounts(); len(got) != 0 {
		t.Fatalf("destroy-by-id calls before the sweeps: %v", got)
	}

	// Each replica sweeps until a sweep claims nothing (bounded, so that
	// a store that hands a lease out twice fails instead of hanging).
	var wg sync.WaitGroup
	reports := make([]lease.SweepReport, 2)
	sweepErrs := make([]error, 2)
	start := make(chan struct{})
	for i, m := range r.managers {
		wg.Go(func() {
			<-start
			for range n + 1 {
				rep, err := m.Sweep(ctx, leaseOperator)
				if err != nil {
					sweepErrs[i] = err
					return
				}
				reports[i].Claimed += rep.Claimed
				reports[i].CleanedUp += rep.CleanedUp
				reports[i].StillPending += rep.StillPending
				reports[i].OrphansDestroyed += rep.OrphansDestroyed
				if rep.Claimed == 0 {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i, err := range sweepErrs {
		if err != nil {
			t.Errorf("sweep of replica %d: %v", i, err)
		}
	}
	t.Logf("sweep reports: %+v / %+v", reports[0], reports[1])

	want := map[string]int{}
	for _, pid := range pending {
		want[pid] = 1
	}
	if diff := cmp.Diff(want, r.provider.destroyCounts()); diff != "" {
		t.Errorf("destroy calls per sandbox (-want +got):\n%s", diff)
	}
	if got := reports[0].Claimed + reports[1].Claimed; got != n {
		t.Errorf("the sweeps claimed %d + %d leases, want %d in all", reports[0].Claimed, reports[1].Claimed, n)
	}
	if got := reports[0].CleanedUp + reports[1].CleanedUp; got != n {
		t.Errorf("the sweeps cleaned up %d + %d leases, want %d in all", reports[0].CleanedUp, reports[1].CleanedUp, n)
	}
	for id, pid := range pending {
		l, err := r.stores[0].GetLease(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if l.Status != lease.StatusReleased || l.Cleanup != "confirmed" || l.CleanupAttempts != 1 {
			t.Errorf("lease %s: status %s, cleanup %q, %d cleanup attempts; want released, confirmed, 1",
				id, l.Status, l.Cleanup, l.CleanupAttempts)
		}
		if st, _ := fakectl.Of(r.provider.Driver).State(pid); st != drivers.StateDestroyed {
			t.Errorf("sandbox %s of lease %s is %s, want destroyed", pid, id, st)
		}
	}
}

// leaseOperator is the principal the lease tests act as.
var leaseOperator = authz.Principal{ID: "op", Role: authz.RoleLocalOperator}

// assignmentsWith returns assignments over an in-memory environment store
// holding envs, for lease managers to read environments from.
func assignmentsWith(tb testing.TB, reg *drivers.Registry, envs ...*environment.Environment) *environment.Assignments {
	tb.Helper()
	st := envhook.NewMemoryStore().(environment.Store)
	for _, e := range envs {
		if err := st.CreateEnvironment(context.Background(), e, false); err != nil {
			tb.Fatal(err)
		}
	}
	return envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), st, reg, &envhook.Options{TestMode: true}).(*environment.Assignments)
}
