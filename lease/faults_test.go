package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

func TestCrashDuringAcquisition(t *testing.T) {
	t.Parallel()
	// LEASE-2, LEASE-9: a process that crashes at any point of an
	// acquisition leaves a record; after its claim expires, a sweep of a new
	// process resolves it and removes any sandbox it made.
	tests := []struct {
		name string
		// crashAt is the call (store or provider) of the crashing process
		// at which it dies: 1 InsertLease (a run key is not read first),
		// 2 driver create, 3 recording the provider lease id, 4 recording
		// active.
		crashAt       int
		wantRecord    bool
		wantSandboxes int // made at the provider before the crash
	}{
		{"before the write-ahead record", 1, false, 0},
		{"between the record and create", 2, true, 0},
		{"while recording the provider lease id", 3, true, 1},
		{"after the provider lease id was recorded", 4, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{})
			c := newCrasher()
			c.arm(tt.crashAt)
			_, err := w.process(c).Acquire(bg, op, w.req(lease.Ephemeral, "run-1"))
			if !errors.Is(err, errCrashed) {
				t.Fatalf("Acquire in the crashing process: %v, want the crash", err)
			}
			if got := len(fakectl.Of(w.fk).Sandboxes()); got != tt.wantSandboxes {
				t.Fatalf("sandboxes at the provider after the crash: %d, want %d", got, tt.wantSandboxes)
			}
			ls, _ := w.store.ListLeases(bg, lease.Filter{})
			if (len(ls) == 1) != tt.wantRecord {
				t.Fatalf("records after the crash: %d, want record %t", len(ls), tt.wantRecord)
			}
			if tt.wantRecord && ls[0].Status != lease.StatusStarting {
				t.Fatalf("record after the crash is %s, want starting", ls[0].Status)
			}
			// A new process: nothing happens while the claim is live.
			m2 := w.newManager(nil)
			rep, err := m2.Sweep(bg, op)
			if err != nil || rep.Interrupted != 0 {
				t.Fatalf("Sweep with a live claim: %+v, %v; want nothing interrupted", rep, err)
			}
			w.clk.Advance(budget + claimGrace)
			rep, err = m2.Sweep(bg, op)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantRecord {
				want := lease.SweepReport{Claimed: 1, Interrupted: 1, CleanedUp: 1}
				if diff := cmp.Diff(want, rep); diff != "" {
					t.Errorf("Sweep (-want +got):\n%s", diff)
				}
				l := w.get(ls[0].ID)
				if l.Status != lease.StatusFailed || l.Cleanup != "confirmed" {
					t.Errorf("record after sweep: %s/%s (%s), want failed/confirmed", l.Status, l.Cleanup, l.CleanupEvidence)
				}
			}
			if live := w.liveSandboxes(); len(live) != 0 {
				t.Errorf("sandboxes left after the sweep: %v", live)
			}
			// The run can acquire again in the new process.
			h, err := m2.Acquire(bg, op, w.req(lease.Ephemeral, "run-1"))
			if err != nil {
				t.Fatalf("Acquire after recovery: %v", err)
			}
			if got := w.get(h.ID()).Status; got != lease.StatusActive {
				t.Errorf("new lease is %s", got)
			}
		})
	}
}

func TestCrashedAcquisitionBlocksItsRunUntilItExpires(t *testing.T) {
	t.Parallel()
	// LEASE-8 across processes: a crashed acquisition's run key is handed
	// to the sweep once its claim expires, and the run then gets a new lease.
	w := newWorld(t, worldOpts{})
	c := newCrasher()
	c.arm(2) // the driver create, after the write-ahead record
	if _, err := w.process(c).Acquire(bg, op, w.req(lease.Ephemeral, "run-1")); !errors.Is(err, errCrashed) {
		t.Fatal(err)
	}
	w.clk.Advance(budget + claimGrace)
	h := w.acquire(lease.Ephemeral, "run-1")
	old, _ := w.store.ListLeases(bg, lease.Filter{Statuses: []lease.Status{lease.StatusPendingCleanup}})
	if len(old) != 1 || old[0].ID == h.ID() {
		t.Errorf("crashed record not left for cleanup: %v", old)
	}
}

func TestCreateFailsAfterAllocating(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup injects faults; fake-1 is the first sandbox.
		setup       func(fk *fake.Driver)
		wantErr     error
		wantStatus  lease.Status
		wantCreates int
		wantStates  map[string]drivers.State
	}{
		{
			name:       "a permanent start failure destroys the sandbox (LEASE-2)",
			setup:      func(fk *fake.Driver) { fakectl.Of(fk).FailNth("start", 1, errPermanent) },
			wantErr:    errPermanent,
			wantStatus: lease.StatusFailed, wantCreates: 1,
			wantStates: map[string]drivers.State{"fake-1": drivers.StateDestroyed},
		},
		{
			name:       "a transient start failure is retried after destroying the first sandbox (LEASE-3)",
			setup:      func(fk *fake.Driver) { fakectl.Of(fk).FailNth("start", 1, nil) },
			wantStatus: lease.StatusActive, wantCreates: 2,
			wantStates: map[string]drivers.State{"fake-1": drivers.StateDestroyed, "fake-2": drivers.StateRunning},
		},
		{
			name: "a failed start whose sandbox cannot be destroyed stays pending cleanup (LEASE-6)",
			setup: func(fk *fake.Driver) {
				fakectl.Of(fk).FailNth("start", 1, errPermanent)
				fakectl.Of(fk).RefuseStop("fake-1", errPermanent)
			},
			wantErr:    lease.ErrCleanupPending,
			wantStatus: lease.StatusPendingCleanup, wantCreates: 1,
			wantStates: map[string]drivers.State{"fake-1": drivers.StateError},
		},
		{
			name: "a transient failure whose sandbox cannot be destroyed is not retried",
			setup: func(fk *fake.Driver) {
				fakectl.Of(fk).FailNth("start", 1, nil)
				fakectl.Of(fk).RefuseStop("fake-1", errPermanent)
			},
			wantErr:    lease.ErrCleanupPending,
			wantStatus: lease.StatusPendingCleanup, wantCreates: 1,
			wantStates: map[string]drivers.State{"fake-1": drivers.StateError},
		},
		{
			name: "transient create failures without allocation are retried",
			setup: func(fk *fake.Driver) {
				fakectl.Of(fk).FailNth("create", 1, nil)
				fakectl.Of(fk).FailNth("create", 2, nil)
			},
			wantStatus: lease.StatusActive, wantCreates: 3,
			wantStates: map[string]drivers.State{"fake-1": drivers.StateRunning},
		},
		{
			name:       "a permanent create failure is not retried",
			setup:      func(fk *fake.Driver) { fakectl.Of(fk).FailNth("create", 1, errPermanent) },
			wantErr:    errPermanent,
			wantStatus: lease.StatusFailed, wantCreates: 1,
			wantStates: map[string]drivers.State{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{})
			tt.setup(w.fk)
			h, err := w.m.Acquire(bg, op, w.req(lease.Ephemeral, "r"))
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil {
				t.Fatalf("Acquire: %v, want %v", err, tt.wantErr)
			}
			ls, _ := w.store.ListLeases(bg, lease.Filter{})
			if len(ls) != 1 || ls[0].Status != tt.wantStatus {
				t.Fatalf("leases: %+v, want one %s", ls, tt.wantStatus)
			}
			if h != nil && h.SandboxID() != ls[0].ProviderLeaseID {
				t.Errorf("handle sandbox %s, record %s", h.SandboxID(), ls[0].ProviderLeaseID)
			}
			if n := fakectl.Of(w.fk).Calls("create"); n != tt.wantCreates {
				t.Errorf("creates = %d, want %d", n, tt.wantCreates)
			}
			got := map[string]drivers.State{}
			for _, s := range fakectl.Of(w.fk).Sandboxes() {
				got[s.ID] = s.State
			}
			if diff := cmp.Diff(tt.wantStates, got); diff != "" {
				t.Errorf("provider sandboxes (-want +got):\n%s", diff)
			}
			if tt.wantStatus == lease.StatusPendingCleanup {
				fakectl.Of(w.fk).ClearFaults()
				if rep, err := w.m.Sweep(bg, op); err != nil || rep.CleanedUp != 1 {
					t.Errorf("Sweep: %+v, %v", rep, err)
				}
				if l := w.get(ls[0].ID); l.Status != lease.StatusFailed || w.state(l.ProviderLeaseID) != drivers.StateDestroyed {
					t.Errorf("after sweep: lease %s, sandbox %s", l.Status, w.state(l.ProviderLeaseID))
				}
			}
		})
	}
}

func TestRecordingTheProviderIDFails(t *testing.T) {
	t.Parallel()
	// LEASE-2: when the provider id cannot be recorded the driver destroys
	// the sandbox best effort; the lease is pending cleanup, and a sweep
	// proves the sandbox gone.
	fs := &failingStore{Store: lease.NewMemoryStore()}
	w := newWorld(t, worldOpts{store: fs})
	fs.failUpdates.Store(1)
	_, err := w.m.Acquire(bg, op, w.req(lease.Ephemeral, "r"))
	if !errors.Is(err, lease.ErrCleanupPending) || !errors.Is(err, errStoreDown) {
		t.Fatalf("Acquire: %v, want ErrCleanupPending and the store error", err)
	}
	ls, _ := w.store.ListLeases(bg, lease.Filter{})
	if len(ls) != 1 || ls[0].Status != lease.StatusPendingCleanup || ls[0].ProviderLeaseID != "fake-1" {
		t.Fatalf("lease: %+v, want pending cleanup of fake-1", ls)
	}
	if rep, err := w.m.Sweep(bg, op); err != nil || rep.CleanedUp != 1 {
		t.Errorf("Sweep: %+v, %v", rep, err)
	}
	if live := w.liveSandboxes(); len(live) != 0 {
		t.Errorf("live sandboxes: %v", live)
	}
}

func TestSlowStartIsResumedByTheNextAcquisition(t *testing.T) {
	t.Parallel()
	// LEASE-3, LEASE-4: a start longer than the budget fails the acquisition
	// at the budget; the sandbox finishes starting and the next acquisition
	// resumes that same sandbox.
	w := newWorld(t, worldOpts{startDelay: 3 * budget})
	var err error
	w.advanceWhenStarting(budget, func() { _, err = w.m.Acquire(bg, op, w.req(lease.ReuseByEnvironment, "run-1")) })
	if !errors.Is(err, lease.ErrStartupBudget) || !strings.Contains(err.Error(), "retained") {
		t.Fatalf("Acquire: %v, want ErrStartupBudget saying the sandbox is retained", err)
	}
	if got := w.clk.Now().Sub(t0); got != budget {
		t.Errorf("acquisition gave up after %s, want the budget %s", got, budget)
	}
	ls, _ := w.store.ListLeases(bg, lease.Filter{})
	if len(ls) != 1 || ls[0].Status != lease.StatusRetained || ls[0].ProviderLeaseID != "fake-1" {
		t.Fatalf("lease after the slow start: %+v", ls)
	}
	w.clk.Advance(2 * budget) // the sandbox finishes starting
	fakectl.Of(w.fk).SetStartDelay(0)
	h := w.acquire(lease.ReuseByEnvironment, "run-2")
	if !h.Resumed() || h.ID() != ls[0].ID || h.SandboxID() != "fake-1" {
		t.Errorf("second acquisition: lease %s sandbox %s resumed %t; want %s fake-1 resumed", h.ID(), h.SandboxID(), h.Resumed(), ls[0].ID)
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
		t.Errorf("creates = %d, want 1", n)
	}
	if l := w.get(h.ID()); l.Status != lease.StatusActive || l.Run != "run-2" || l.Uses != 1 {
		t.Errorf("resumed lease: status %s run %s uses %d", l.Status, l.Run, l.Uses)
	}
}

func TestSlowEphemeralStartIsDestroyed(t *testing.T) {
	t.Parallel()
	// LEASE-3: an ephemeral sandbox that did not start in time is destroyed.
	w := newWorld(t, worldOpts{startDelay: 3 * budget})
	var err error
	w.advanceWhenStarting(budget, func() { _, err = w.m.Acquire(bg, op, w.req(lease.Ephemeral, "r")) })
	if !errors.Is(err, lease.ErrStartupBudget) {
		t.Fatalf("Acquire: %v, want ErrStartupBudget", err)
	}
	ls, _ := w.store.ListLeases(bg, lease.Filter{})
	if len(ls) != 1 || ls[0].Status != lease.StatusFailed || w.state("fake-1") != drivers.StateDestroyed {
		t.Errorf("lease %+v, sandbox %s; want failed and destroyed", ls, w.state("fake-1"))
	}
}

// stoppedReusable makes a reusable lease, releases it with stop and returns
// its id.
func stoppedReusable(t *testing.T, w *world) string {
	t.Helper()
	h := w.acquire(lease.ReuseByEnvironment, "run-1")
	l, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Stop})
	if err != nil || l.Status != lease.StatusReleased || l.ReuseKey == "" || w.state(l.ProviderLeaseID) != drivers.StateStopped {
		t.Fatalf("stop release: %+v, %v", l, err)
	}
	return h.ID()
}

func TestFailedResumePreservesTheLease(t *testing.T) {
	t.Parallel()
	// LEASE-5: a resume that fails with anything but not-found keeps the
	// lease and its sandbox, creates nothing, and says so.
	w := newWorld(t, worldOpts{})
	id := stoppedReusable(t, w)
	fakectl.Of(w.fk).Inject(fakectl.Fault{Op: "resume", Err: errPermanent})
	_, err := w.m.Acquire(bg, op, w.req(lease.ReuseByEnvironment, "run-2"))
	if !errors.Is(err, lease.ErrPreserved) || !errors.Is(err, errPermanent) || !strings.Contains(err.Error(), "preserved") {
		t.Fatalf("Acquire: %v, want ErrPreserved wrapping the cause", err)
	}
	l := w.get(id)
	if l.Status != lease.StatusReleased || l.ReuseKey == "" || l.ProviderLeaseID != "fake-1" || l.ClaimedBy != "" {
		t.Errorf("preserved lease: %+v", l)
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
		t.Errorf("creates = %d, want 1 (no silent replacement)", n)
	}
	if st := w.state("fake-1"); st != drivers.StateStopped {
		t.Errorf("sandbox %s, want stopped (kept)", st)
	}
	// Once the provider recovers, the same sandbox is resumed.
	fakectl.Of(w.fk).ClearFaults()
	h := w.acquire(lease.ReuseByEnvironment, "run-3")
	if h.ID() != id || h.SandboxID() != "fake-1" || !h.Resumed() {
		t.Errorf("after recovery: lease %s sandbox %s", h.ID(), h.SandboxID())
	}
}

func TestTransientResumeFailureIsRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	id := stoppedReusable(t, w)
	fakectl.Of(w.fk).FailNth("resume", 1, nil)
	h := w.acquire(lease.ReuseByEnvironment, "run-2")
	if h.ID() != id || fakectl.Of(w.fk).Calls("resume") != 2 {
		t.Errorf("lease %s after %d resumes, want %s after 2", h.ID(), fakectl.Of(w.fk).Calls("resume"), id)
	}
}

func TestReplacementReasons(t *testing.T) {
	t.Parallel()
	// LEASE-4: a recorded sandbox that cannot be reused is replaced, with the
	// reason on the new lease; the old sandbox is cleaned up.
	tests := []struct {
		name       string
		change     func(w *world, oldPID string)
		reason     string
		oldStatus  lease.Status
		oldSandbox drivers.State
	}{
		{"the provider lost the sandbox", func(w *world, pid string) {
			if err := fakectl.Of(w.fk).Lose(pid); err != nil {
				w.t.Fatal(err)
			}
		}, "not_found", lease.StatusFailed, "lost"},
		{"the lease expired", func(w *world, _ string) { w.clk.Advance(retainTTL + time.Second) },
			"expired", lease.StatusExpired, drivers.StateDestroyed},
		{"the identity changed", func(w *world, _ string) {
			w.env.Config = w.env.Config.Clone()
			w.env.Config["region"] = "elsewhere-2"
		}, "identity_mismatch", lease.StatusReleased, drivers.StateDestroyed},
		{"the account changed", func(w *world, _ string) {
			w.env.Config = w.env.Config.Clone()
			w.env.Config["api_key"] = config.SecretRef{ID: "fake-key", Version: 9}
		}, "identity_mismatch", lease.StatusReleased, drivers.StateDestroyed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{})
			old := stoppedReusable(t, w)
			tt.change(w, "fake-1")
			h := w.acquire(lease.ReuseByEnvironment, "run-2")
			l := w.get(h.ID())
			if h.ID() == old || l.Replaces != old || l.ReplaceReason != tt.reason || h.Resumed() {
				t.Errorf("replacement: lease %s replaces %q reason %q resumed %t; want a new lease replacing %s (%s)",
					h.ID(), l.Replaces, l.ReplaceReason, h.Resumed(), old, tt.reason)
			}
			o := w.get(old)
			if o.Status != tt.oldStatus || o.ReuseKey != "" || !strings.Contains(o.FailureReason, string(tt.reason)) {
				t.Errorf("old lease: status %s reuse key %q reason %q; want %s", o.Status, o.ReuseKey, o.FailureReason, tt.oldStatus)
			}
			if st := w.state("fake-1"); st != tt.oldSandbox {
				t.Errorf("old sandbox %s, want %s", st, tt.oldSandbox)
			}
		})
	}
}

func TestKnobChangeKeepsTheSandboxReusable(t *testing.T) {
	t.Parallel()
	// LEASE-4: the reuse fingerprint leaves knobs and metadata out.
	w := newWorld(t, worldOpts{})
	old := stoppedReusable(t, w)
	w.env.Config = w.env.Config.Clone()
	w.env.Config["cpus"] = int64(4)
	w.env.Config["notes"] = "tuned"
	if h := w.acquire(lease.ReuseByEnvironment, "run-2"); h.ID() != old || !h.Resumed() {
		t.Errorf("after a knob change: lease %s resumed %t, want %s resumed", h.ID(), h.Resumed(), old)
	}
}
