package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

func TestReleaseDispositions(t *testing.T) {
	t.Parallel()
	// LEASE-6.
	tests := []struct {
		name      string
		policy    lease.Policy
		opts      lease.ReleaseOptions
		status    lease.Status
		sandbox   drivers.State
		resumable bool
	}{
		{"keep retains", lease.Ephemeral, lease.ReleaseOptions{Disposition: lease.Keep}, lease.StatusRetained, drivers.StateRunning, false},
		{"stop of an ephemeral lease", lease.Ephemeral, lease.ReleaseOptions{Disposition: lease.Stop}, lease.StatusReleased, drivers.StateStopped, false},
		{"stop of a reusable lease keeps it resumable", lease.ReuseByWorkspace, lease.ReleaseOptions{Disposition: lease.Stop}, lease.StatusReleased, drivers.StateStopped, true},
		{"keep of a reusable lease", lease.ReuseByEnvironment, lease.ReleaseOptions{Disposition: lease.Keep}, lease.StatusRetained, drivers.StateRunning, true},
		{"destroy", lease.ReuseByEnvironment, lease.ReleaseOptions{Disposition: lease.Destroy}, lease.StatusReleased, drivers.StateDestroyed, false},
		{"retain on failure keeps a failed run's sandbox", lease.RetainOnFailure,
			lease.ReleaseOptions{Disposition: lease.Destroy, RunFailed: true, Reason: "tests failed"}, lease.StatusRetained, drivers.StateRunning, false},
		{"retain on failure destroys after success", lease.RetainOnFailure,
			lease.ReleaseOptions{Disposition: lease.Destroy}, lease.StatusReleased, drivers.StateDestroyed, false},
		// Issue 49: the zero options let the policy decide; nothing is
		// left running unless Keep is asked for by name.
		{"zero options destroy an ephemeral lease", lease.Ephemeral, lease.ReleaseOptions{}, lease.StatusReleased, drivers.StateDestroyed, false},
		{"zero options stop a reusable lease resumable", lease.ReuseByWorkspace, lease.ReleaseOptions{}, lease.StatusReleased, drivers.StateStopped, true},
		{"zero options stop a reusable-by-environment lease resumable", lease.ReuseByEnvironment, lease.ReleaseOptions{}, lease.StatusReleased, drivers.StateStopped, true},
		{"zero options destroy a retain-on-failure lease after success", lease.RetainOnFailure, lease.ReleaseOptions{}, lease.StatusReleased, drivers.StateDestroyed, false},
		{"zero options keep a retain-on-failure lease's failed run", lease.RetainOnFailure,
			lease.ReleaseOptions{RunFailed: true, Reason: "tests failed"}, lease.StatusRetained, drivers.StateRunning, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{})
			h := w.acquire(tt.policy, "r")
			l, err := h.Release(bg, tt.opts)
			if err != nil {
				t.Fatalf("Release: %v", err)
			}
			if l.Status != tt.status || (l.ReuseKey != "") != tt.resumable {
				t.Errorf("lease: status %s reuse key %q; want %s resumable %t", l.Status, l.ReuseKey, tt.status, tt.resumable)
			}
			if st := w.state(l.ProviderLeaseID); st != tt.sandbox {
				t.Errorf("sandbox %s, want %s", st, tt.sandbox)
			}
			if stored := w.get(l.ID); stored.Version != l.Version || stored.Status != l.Status {
				t.Errorf("returned lease differs from the stored one")
			}
			if tt.opts.RunFailed && l.FailureReason != tt.opts.Reason {
				t.Errorf("failure reason %q, want %q", l.FailureReason, tt.opts.Reason)
			}
			// Every receipt names its evidence (PRP-6): the provider's for
			// a stop or destroy; a keep says it stopped nothing.
			if tt.status == lease.StatusRetained {
				if l.CleanupEvidenceKind != drivers.EvidenceNone || !strings.HasPrefix(l.CleanupEvidence, "kept: no task was stopped") {
					t.Errorf("kept lease: evidence %s %q, want none and a receipt that says nothing was stopped", l.CleanupEvidenceKind, l.CleanupEvidence)
				}
			} else if l.CleanupEvidenceKind != drivers.EvidenceProvider {
				t.Errorf("evidence kind %q, want provider", l.CleanupEvidenceKind)
			}
		})
	}
}

func TestUnconfirmedStopIsNotProof(t *testing.T) {
	t.Parallel()
	// LEASE-7: only a confirmed receipt for the same provider lease id
	// proves a stop; otherwise the lease is pending cleanup and a sweep
	// finishes it.
	tests := []struct {
		name   string
		inject func(fk *fake.Driver, pid string)
	}{
		{"stop accepted but not confirmed", func(fk *fake.Driver, pid string) { fakectl.Of(fk).FakeStop(pid, "unconfirmed") }},
		{"confirmation for another sandbox", func(fk *fake.Driver, pid string) { fakectl.Of(fk).FakeStop(pid, "foreign_id") }},
		// PRP-6: a runner's attestation alone never ends a lease.
		{"confirmed by the runner's word only", func(fk *fake.Driver, pid string) { fakectl.Of(fk).FakeStop(pid, "runner_attested") }},
		{"stop refused", func(fk *fake.Driver, pid string) { fakectl.Of(fk).RefuseStop(pid, nil) }},
	}
	for _, tt := range tests {
		for _, d := range []lease.Disposition{lease.Stop, lease.Destroy} {
			t.Run(tt.name+"/"+string(d), func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, worldOpts{})
				h := w.acquire(lease.ReuseByEnvironment, "r")
				pid := h.SandboxID()
				tt.inject(w.fk, pid)
				l, err := h.Release(bg, lease.ReleaseOptions{Disposition: d})
				if !errors.Is(err, lease.ErrCleanupPending) {
					t.Fatalf("Release: %v, want ErrCleanupPending", err)
				}
				if l.Status != lease.StatusPendingCleanup || l.Cleanup != "pending" || l.FailureReason == "" || l.ReuseKey != "" {
					t.Errorf("lease: %+v", l)
				}
				if st := w.state(pid); st != drivers.StateRunning {
					t.Errorf("sandbox %s, want still running", st)
				}
				// While the fault lasts the sweep keeps it pending.
				rep, err := w.m.Sweep(bg, op)
				if err != nil || rep.StillPending != 1 {
					t.Errorf("Sweep during the fault: %+v, %v", rep, err)
				}
				if got := w.get(l.ID); got.Status != lease.StatusPendingCleanup || got.CleanupAttempts != 1 {
					t.Errorf("after failed sweep: %s attempts %d", got.Status, got.CleanupAttempts)
				}
				fakectl.Of(w.fk).ClearFaults()
				rep, err = w.m.Sweep(bg, op)
				if err != nil || rep.CleanedUp != 1 {
					t.Errorf("Sweep: %+v, %v", rep, err)
				}
				got := w.get(l.ID)
				if got.Status != lease.StatusReleased || got.Cleanup != "confirmed" || w.state(pid) != drivers.StateDestroyed {
					t.Errorf("after sweep: %s/%s, sandbox %s", got.Status, got.Cleanup, w.state(pid))
				}
				if got.CleanupEvidenceKind != drivers.EvidenceProvider {
					t.Errorf("after sweep: evidence kind %q, want provider", got.CleanupEvidenceKind)
				}
				// The reuse key is free again: a new sandbox is made.
				if h2 := w.acquire(lease.ReuseByEnvironment, "r2"); h2.ID() == l.ID {
					t.Errorf("pending lease %s was reused", l.ID)
				}
			})
		}
	}
}

func TestSweepExpiresAndDestroysOrphans(t *testing.T) {
	t.Parallel()
	// LEASE-9.
	w := newWorld(t, worldOpts{})
	active := w.acquire(lease.Ephemeral, "a")
	kept := w.acquire(lease.Ephemeral, "b")
	if _, err := kept.Release(bg, lease.ReleaseOptions{Disposition: lease.Keep}); err != nil {
		t.Fatal(err)
	}
	cfg := w.env.Config
	// An orphan of this instance and environment, one of another instance,
	// and one labelled for a lease that ended.
	orphan, err := w.fk.Acquire(bg, cfg, drivers.AcquireRequest{LeaseID: "gone", Labels: map[string]string{
		"berth.instance": "test-instance", "berth.environment": "env-1", "berth.lease": "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := w.fk.Acquire(bg, cfg, drivers.AcquireRequest{Labels: map[string]string{
		"berth.instance": "other-instance", "berth.environment": "env-1"}})
	if err != nil {
		t.Fatal(err)
	}
	done := w.acquire(lease.Ephemeral, "c")
	stray, err := w.fk.Acquire(bg, cfg, drivers.AcquireRequest{Labels: done.Lease().Labels})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	rep, err := w.m.Sweep(bg, op)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lease.SweepReport{OrphansDestroyed: 2}, rep); diff != "" {
		t.Errorf("first Sweep (-want +got):\n%s", diff)
	}
	for id, want := range map[string]drivers.State{
		orphan.ID(): drivers.StateDestroyed, stray.ID(): drivers.StateDestroyed, foreign.ID(): drivers.StateRunning,
		active.SandboxID(): drivers.StateRunning, kept.SandboxID(): drivers.StateRunning,
	} {
		if got := w.state(id); got != want {
			t.Errorf("sandbox %s: %s, want %s", id, got, want)
		}
	}
	w.clk.Advance(leaseTTL + time.Second)
	rep, err = w.m.Sweep(bg, op)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lease.SweepReport{Claimed: 1, Expired: 1}, rep); diff != "" {
		t.Errorf("Sweep after the lease TTL (-want +got):\n%s", diff)
	}
	if l := w.get(active.ID()); l.Status != lease.StatusExpired || w.state(l.ProviderLeaseID) != drivers.StateDestroyed {
		t.Errorf("expired lease %s, sandbox %s", l.Status, w.state(l.ProviderLeaseID))
	}
	w.clk.Advance(retainTTL)
	if rep, _ := w.m.Sweep(bg, op); rep.Expired != 1 || w.get(kept.ID()).Status != lease.StatusExpired {
		t.Errorf("retained lease not expired after the retain TTL: %+v", rep)
	}
}

func TestConcurrentSweepsCleanEachLeaseOnce(t *testing.T) {
	t.Parallel()
	// LEASE-10 on the memory store: two managers sweeping at once destroy
	// each pending sandbox once.
	w := newWorld(t, worldOpts{})
	const n = 20
	for i := range n {
		h := w.acquire(lease.Ephemeral, "r"+string(rune('a'+i)))
		fakectl.Of(w.fk).RefuseStop(h.SandboxID(), nil)
		if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); !errors.Is(err, lease.ErrCleanupPending) {
			t.Fatal(err)
		}
	}
	fakectl.Of(w.fk).ClearFaults()
	before := fakectl.Of(w.fk).Calls("destroy")
	m2 := w.newManager(nil)
	var r1, r2 lease.SweepReport
	d1 := inBackground(func() { r1, _ = w.m.Sweep(bg, op) })
	d2 := inBackground(func() { r2, _ = m2.Sweep(bg, op) })
	<-d1
	<-d2
	if r1.CleanedUp+r2.CleanedUp != n || r1.Claimed+r2.Claimed != n {
		t.Errorf("sweeps cleaned %d+%d (claimed %d+%d), want %d in all", r1.CleanedUp, r2.CleanedUp, r1.Claimed, r2.Claimed, n)
	}
	if got := fakectl.Of(w.fk).Calls("destroy") - before; got != n {
		t.Errorf("provider destroys = %d, want %d (each cleanup once)", got, n)
	}
}

func TestDestroyingAStoppedReusableLease(t *testing.T) {
	t.Parallel()
	// LEASE-6, CFG-7: a reusable lease stopped earlier still holds its
	// sandbox; Release with Destroy destroys it with proof and ends the
	// reuse, while Stop or Keep on it change nothing.
	w := newWorld(t, worldOpts{})
	h := w.acquire(lease.ReuseByEnvironment, "r")
	stopped, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Stop})
	if err != nil {
		t.Fatal(err)
	}
	pid := stopped.ProviderLeaseID
	for _, d := range []lease.Disposition{lease.Stop, lease.Keep} {
		l, err := w.m.Release(bg, op, stopped.ID, lease.ReleaseOptions{Disposition: d})
		if err != nil || l.ReuseKey == "" || w.state(pid) != drivers.StateStopped {
			t.Fatalf("release %s of a stopped reusable lease: err %v, reuse key %q, sandbox %s; want unchanged", d, err, l.ReuseKey, w.state(pid))
		}
	}
	l, err := w.m.Release(bg, op, stopped.ID, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatal(err)
	}
	if l.Status != lease.StatusReleased || l.ReuseKey != "" || l.Cleanup != "confirmed" {
		t.Errorf("lease after destroy: status %s, reuse key %q, cleanup %s", l.Status, l.ReuseKey, l.Cleanup)
	}
	if st := w.state(pid); st != drivers.StateDestroyed {
		t.Errorf("sandbox %s, want destroyed", st)
	}
}

// readCountingStore counts lease reads by id and by filter.
type readCountingStore struct {
	lease.Store
	gets, lists atomic.Int64
}

func (s *readCountingStore) GetLease(ctx context.Context, id string) (*lease.Lease, error) {
	s.gets.Add(1)
	return s.Store.GetLease(ctx, id)
}

func (s *readCountingStore) ListLeases(ctx context.Context, f lease.Filter) ([]*lease.Lease, error) {
	s.lists.Add(1)
	return s.Store.ListLeases(ctx, f)
}

func TestSweepReadsTheLiveLeasesOncePerEnvironment(t *testing.T) {
	t.Parallel()
	// The orphan search reads the environment's live leases once, not each
	// listed sandbox's records (two reads each, from every replica's every
	// sweep): a sweep's reads do not grow with the live sandboxes. An
	// orphan among them is still found and destroyed.
	st := &readCountingStore{Store: lease.NewMemoryStore()}
	w := newWorld(t, worldOpts{store: st})
	var live []*lease.Handle
	sweep := func(n int) (gets, lists int64) {
		for len(live) < n {
			live = append(live, w.acquire(lease.Ephemeral, fmt.Sprint("run-", len(live))))
		}
		orphan, err := w.fk.Acquire(bg, w.env.Config, drivers.AcquireRequest{LeaseID: "gone", Labels: map[string]string{
			"berth.instance": "test-instance", "berth.environment": w.env.ID, "berth.lease": "gone"}})
		if err != nil {
			t.Fatal(err)
		}
		st.gets.Store(0)
		st.lists.Store(0)
		rep, err := w.m.Sweep(bg, op)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OrphansDestroyed != 1 || w.state(orphan.ID()) != drivers.StateDestroyed {
			t.Errorf("Sweep with %d live leases: %+v, orphan %s; want it destroyed", n, rep, w.state(orphan.ID()))
		}
		for _, h := range live {
			if got := w.state(h.SandboxID()); got != drivers.StateRunning {
				t.Errorf("lease %s's sandbox: %s, want running", h.ID(), got)
			}
		}
		return st.gets.Load(), st.lists.Load()
	}
	gets1, lists1 := sweep(2)
	gets2, lists2 := sweep(20)
	// The orphan alone is read by id (its label) and by provider id.
	if gets1 != 1 || gets2 != 1 || lists2 != lists1 {
		t.Errorf("a sweep read %d leases by id and listed %d times with 2 live sandboxes, %d and %d with 20; want 1 read by id (the orphan's) and as many lists", gets1, lists1, gets2, lists2)
	}
}

func TestDispositionText(t *testing.T) {
	t.Parallel()
	// The dispositions are the words a host converts.
	for d, want := range map[lease.Disposition]string{lease.ByPolicy: "policy", lease.Keep: "keep", lease.Stop: "stop", lease.Destroy: "destroy"} {
		if string(d) != want {
			t.Errorf("disposition %q, want %q", d, want)
		}
	}
	// Any other word is refused before the lease is touched; "" is by
	// policy, as "policy" is (an ephemeral lease is destroyed).
	w := newWorld(t, worldOpts{})
	for _, d := range []lease.Disposition{"", lease.ByPolicy} {
		h := w.acquire(lease.Ephemeral, "run-"+string(d))
		if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: "retain"}); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("unknown disposition: %v, want errcode.ErrInvalid", err)
		}
		if l := w.get(h.ID()); l.Status != lease.StatusActive || l.ClaimedBy != "" {
			t.Errorf("a refused release touched the lease: %s, claimed by %q", l.Status, l.ClaimedBy)
		}
		l, err := h.Release(bg, lease.ReleaseOptions{Disposition: d})
		if err != nil || l.Status != lease.StatusReleased || w.state(l.ProviderLeaseID) != drivers.StateDestroyed {
			t.Errorf("release %q: %+v, %v, want released, its sandbox destroyed", d, l, err)
		}
	}
}
