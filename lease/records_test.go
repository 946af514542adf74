package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/lease"
)

// draftHandle acquires a draft lease on the world's fake.
func draftHandle(t *testing.T, w *world) *lease.Handle {
	t.Helper()
	cfg, err := w.fk.Schema().Normalize(map[string]any{"api_key": "draft-secret-77a"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.m.Acquire(bg, op, lease.Draft(lease.AcquireRequest{}, w.fk.Name(), cfg))
	if err != nil {
		t.Fatal(err)
	}
	if rec := w.get(h.ID()); !rec.Draft || rec.ProviderLeaseID != h.SandboxID() {
		t.Fatalf("write-ahead record of the draft: draft %t, sandbox %q; want a draft record of %s", rec.Draft, rec.ProviderLeaseID, h.SandboxID())
	}
	return h
}

func TestDraftRecordRemovedOnceCleanupIsProven(t *testing.T) {
	t.Parallel()
	// PRB-4 (issue 14 item 6): the record exists while the sandbox may;
	// a proven release removes it.
	w := newWorld(t, worldOpts{})
	h := draftHandle(t, w)
	l, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Fatalf("Release: %+v, %v; want released with proof", l, err)
	}
	if _, err := w.store.GetLease(bg, h.ID()); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("the draft's record after a proven cleanup: %v, want removed (errcode.ErrNotFound)", err)
	}
	if st := w.state(h.SandboxID()); st != drivers.StateDestroyed {
		t.Errorf("sandbox %s, want destroyed", st)
	}
}

func TestDraftRecordKeptWhileCleanupIsUnproven(t *testing.T) {
	t.Parallel()
	// PRB-4: an unproven cleanup leaves a pending_cleanup record without
	// any secret field, until a sweep proves it; then it goes.
	w := newWorld(t, worldOpts{})
	h := draftHandle(t, w)
	fakectl.Of(w.fk).RefuseStop(h.SandboxID(), errors.New("provider busy"))
	if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); !errors.Is(err, lease.ErrCleanupPending) {
		t.Fatalf("Release with a refused destroy: %v, want ErrCleanupPending", err)
	}
	rec := w.get(h.ID())
	if rec.Status != lease.StatusPendingCleanup {
		t.Errorf("record status %s, want pending_cleanup", rec.Status)
	}
	if _, has := rec.Config["api_key"]; has {
		t.Errorf("the pending record holds the secret field")
	}
	fakectl.Of(w.fk).ClearFaults()
	rep, err := w.newManager(nil).Sweep(bg, op)
	if err != nil || rep.CleanedUp != 1 {
		t.Fatalf("Sweep = %+v, %v; want the cleanup proven", rep, err)
	}
	if _, err := w.store.GetLease(bg, h.ID()); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("the draft's record after the sweep proved its cleanup: %v, want removed", err)
	}
}

func TestRetentionPrunesEndedLeases(t *testing.T) {
	t.Parallel()
	// Issue 11 item 7: ended leases are kept, receipt included, for the
	// retention period after their release; a sweep then prunes them. Live
	// leases are never pruned.
	const retention = 72 * time.Hour
	w := newWorld(t, worldOpts{options: func(o *mopts) { o.PruneAfter = retention }})
	done := w.acquire(lease.Ephemeral, "r1")
	if _, err := done.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	live := w.acquire(lease.ReuseByEnvironment, "r2")
	w.clk.Advance(retention - time.Minute)
	m := w.newManager(func(o *mopts) { o.PruneAfter = retention })
	rep, err := m.Sweep(bg, op)
	if err != nil || rep.Pruned != 0 {
		t.Fatalf("sweep within the retention = %+v, %v; want nothing pruned", rep, err)
	}
	if l := w.get(done.ID()); l.CleanupEvidence == "" {
		t.Errorf("the receipt of an ended lease within its retention is gone")
	}
	w.clk.Advance(2 * time.Minute)
	// The live lease expired meanwhile (LeaseTTL 24h < retention): the
	// sweep destroys it first; its record is kept, it ended just now.
	rep, err = m.Sweep(bg, op)
	if err != nil || rep.Pruned != 1 {
		t.Fatalf("sweep after the retention = %+v, %v; want one record pruned", rep, err)
	}
	if _, err := w.store.GetLease(bg, done.ID()); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("the ended lease after its retention: %v, want pruned", err)
	}
	if _, err := w.store.GetLease(bg, live.ID()); err != nil {
		t.Errorf("a lease that ended just now was pruned: %v", err)
	}
	// A negative retention keeps records forever.
	w.clk.Advance(10 * retention)
	rep, err = w.newManager(func(o *mopts) { o.PruneAfter = -1 }).Sweep(bg, op)
	if err != nil || rep.Pruned != 0 {
		t.Errorf("sweep with a negative retention = %+v, %v; want nothing pruned", rep, err)
	}
}

func TestSecretsRetiredWhileStartingMakeNoSandbox(t *testing.T) {
	t.Parallel()
	// CFG-7, LEASE-9: the catalog retires (and, with no lease using it
	// yet, deletes) the environment's secret right after the acquisition
	// resolved it and before its record holds it. No sandbox may be made
	// whose cleanup could not resolve its credentials.
	ctx := context.Background()
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	keeper := envhook.NewSecretKeeper(envhook.NewMemorySecretUseStore().(environment.SecretUseStore), secrets, nil)
	ref, err := secrets.Put(ctx, "env-1", "api_key", "k-123")
	if err != nil {
		t.Fatal(err)
	}
	var retired atomic.Bool
	w := newWorld(t, worldOpts{
		fake:   &fake.Options{APIKey: "k-123"},
		config: map[string]any{"startup_timeout": budget.String(), "api_key": ref},
		options: func(o *mopts) {
			o.SecretKeeper = keeper
			o.Secrets = func(ctx context.Context, r config.SecretRef) (string, error) {
				v, err := secrets.Get(ctx, r)
				if err == nil && retired.CompareAndSwap(false, true) {
					if err := keeper.Retire(ctx, []config.SecretRef{{ID: r.ID}}); err != nil {
						t.Error(err)
					}
				}
				return v, err
			}
		},
	})
	_, err = w.m.Acquire(bg, op, w.req(lease.Ephemeral, "r1"))
	if err == nil {
		t.Fatal("Acquire succeeded although its secret was deleted before its record held it")
	}
	if live := w.liveSandboxes(); len(live) != 0 {
		t.Errorf("sandboxes made: %v", live)
	}
	ls, _ := w.store.ListLeases(bg, lease.Filter{})
	if len(ls) != 1 || ls[0].Status != lease.StatusFailed {
		t.Errorf("lease records %+v; want one failed", ls)
	}
}

func TestRetentionPrunesInBatchesUntilCaughtUp(t *testing.T) {
	t.Parallel()
	// Issue 55 item 4: a sweep prunes in batches of its limit until the
	// records past the retention are gone or 50 batches were removed, so
	// that pruning keeps up with more ended leases than one batch
	// between two sweeps. Here the limit is 1: 53 records take two sweeps.
	const retention = time.Hour
	tune := func(o *mopts) {
		o.PruneAfter = retention
		knobs(o, func(k *leasetune.Knobs) { k.SweepLimit = 1 })
	}
	w := newWorld(t, worldOpts{options: tune})
	for i := range 53 {
		h := w.acquire(lease.Ephemeral, fmt.Sprint("r", i))
		if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Fatal(err)
		}
	}
	w.clk.Advance(retention + time.Minute)
	kept := w.acquire(lease.Ephemeral, "within")
	if _, err := kept.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	m := w.newManager(tune)
	for _, want := range []int{50, 3, 0} {
		rep, err := m.Sweep(bg, op)
		if err != nil || rep.Pruned != want {
			t.Fatalf("sweep = %+v, %v; want %d records pruned", rep, err, want)
		}
	}
	if _, err := w.store.GetLease(bg, kept.ID()); err != nil {
		t.Errorf("the lease within the retention was pruned: %v", err)
	}
}
