package lease_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// runnerSpec is a well-formed runner spec for arch; the fake never
// executes the binary.
func runnerSpec(arch, sum string) drivers.RunnerSpec {
	return drivers.RunnerSpec{Binary: "/opt/berth/runner-" + arch, SHA256: strings.Repeat(sum, 32), Arch: arch}
}

// otherArch is an architecture that is not this host's (the fake's).
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// issue 25: one set serves targets of several architectures; the lease
// gets the binary of its target's architecture (the fake reports this
// host's) and records it.
func TestALeaseRecordsTheRunnerOfItsTargetsArchitecture(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	req := w.req(lease.Ephemeral, "r1")
	req.Runner = drivers.RunnerSetOf(runnerSpec(otherArch(), "ab"), runnerSpec(runtime.GOARCH, "cd"))
	h, err := w.m.Acquire(bg, op, req)
	if err != nil {
		t.Fatal(err)
	}
	want := runnerSpec(runtime.GOARCH, "cd")
	if got := w.get(h.ID()).Runner; got == nil || *got != want {
		t.Errorf("recorded runner %+v, want %+v", got, want)
	}
	if got := h.Lease().Runner; got == nil || *got != want {
		t.Errorf("the handle's lease shows runner %+v, want %+v", got, want)
	}
	plain, err := w.m.Acquire(bg, op, w.req(lease.Ephemeral, "r2"))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.get(plain.ID()).Runner; got != nil {
		t.Errorf("a lease without a runner records %+v", got)
	}
	if _, err := leasehook.HostRunner(plain, bg); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("HostRunner of a lease acquired without a runner = %v, want ErrUnsupported", err)
	}
}

// issue 25: a target of an architecture the set has no binary for is
// refused before anything is allocated or written, naming the
// architecture; a Build is asked for it once, before allocation.
func TestATargetOfAnArchitectureWithoutARunnerIsRefusedBeforeAllocation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	req := w.req(lease.Ephemeral, "r1")
	req.Runner = drivers.RunnerSetOf(runnerSpec(otherArch(), "ab"))
	_, err := w.m.Acquire(bg, op, req)
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), "no runner binary for architecture "+runtime.GOARCH) ||
		!strings.Contains(err.Error(), "linux/"+runtime.GOARCH) {
		t.Fatalf("Acquire = %v, want unsupported naming %s", err, runtime.GOARCH)
	}
	if n := len(fakectl.Of(w.fk).Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes allocated", n)
	}
	if ls, _ := w.store.ListLeases(bg, lease.Filter{}); len(ls) != 0 {
		t.Errorf("lease records written: %+v", ls)
	}

	// A Build supplies the missing architecture, once.
	var asked []string
	req.Runner = &drivers.RunnerSet{Build: func(ctx context.Context, arch string) (drivers.RunnerSpec, error) {
		asked = append(asked, arch)
		if n := len(fakectl.Of(w.fk).Sandboxes()); n != 0 {
			t.Errorf("Build called after %d sandboxes were allocated", n)
		}
		return drivers.RunnerSpec{Binary: "/cache/berth-runner", SHA256: strings.Repeat("ef", 32)}, nil
	}}
	for _, run := range []string{"r2", "r3"} {
		req.Run = run
		h, err := w.m.Acquire(bg, op, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.get(h.ID()).Runner; got == nil || got.Binary != "/cache/berth-runner" || got.Arch != runtime.GOARCH {
			t.Errorf("recorded runner %+v, want the built one for %s", got, runtime.GOARCH)
		}
	}
	if len(asked) != 1 || asked[0] != runtime.GOARCH {
		t.Errorf("Build asked for %v, want once for %s", asked, runtime.GOARCH)
	}
	// A Build that fails refuses before allocation, with its error.
	n := len(fakectl.Of(w.fk).Sandboxes())
	req.Run = "r4"
	req.Runner = &drivers.RunnerSet{Build: func(context.Context, string) (drivers.RunnerSpec, error) {
		return drivers.RunnerSpec{}, errors.New("no go command")
	}}
	if _, err := w.m.Acquire(bg, op, req); err == nil || !strings.Contains(err.Error(), "no go command") {
		t.Errorf("Acquire with a failing Build = %v, want its error", err)
	}
	if len(fakectl.Of(w.fk).Sandboxes()) != n {
		t.Error("a sandbox was allocated after the Build failed")
	}
}

// issue 26: a reusable sandbox prepared at creation for one runner binary
// is never resumed for another: the acquisition replaces it, recording
// ReplaceRunnerMismatch; the same binary resumes it.
func TestAReusedSandboxOfAnotherRunnerIsReplaced(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	acquire := func(run, sum string) *lease.Handle {
		t.Helper()
		req := w.req(lease.ReuseByEnvironment, run)
		req.Runner = drivers.RunnerSetOf(runnerSpec(runtime.GOARCH, sum))
		h, err := w.m.Acquire(bg, op, req)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	first := acquire("r1", "ab")
	if _, err := first.Release(bg, lease.ReleaseOptions{Disposition: lease.Stop}); err != nil {
		t.Fatal(err)
	}
	same := acquire("r2", "ab")
	if same.ID() != first.ID() || same.SandboxID() != first.SandboxID() {
		t.Fatalf("the same binary got lease %s sandbox %s, want %s's %s resumed", same.ID(), same.SandboxID(), first.ID(), first.SandboxID())
	}
	if _, err := same.Release(bg, lease.ReleaseOptions{Disposition: lease.Stop}); err != nil {
		t.Fatal(err)
	}
	other := acquire("r3", "cd")
	if other.ID() == first.ID() || other.SandboxID() == first.SandboxID() {
		t.Fatalf("another binary resumed lease %s (sandbox %s)", other.ID(), other.SandboxID())
	}
	l := w.get(other.ID())
	if l.Replaces != first.ID() || l.ReplaceReason != "runner_mismatch" || l.Runner == nil || l.Runner.SHA256 != strings.Repeat("cd", 32) {
		t.Errorf("replacement %+v: want it to replace %s for runner_mismatch with the new binary", l, first.ID())
	}
	if st := w.state(first.SandboxID()); st != drivers.StateDestroyed {
		t.Errorf("the old sandbox is %s, want destroyed", st)
	}
}

// countingStopper is a TaskStopper that records the leases it was asked
// to stop the tasks of.
type countingStopper struct {
	mu    sync.Mutex
	asked []string
}

func (c *countingStopper) StopTasks(_ context.Context, id string) (leasehook.TaskStopReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, id)
	return leasehook.TaskStopReport{}, nil
}

func (c *countingStopper) LeaseEnded(string) {}

// issue 29: the runner hook is asked to stop the tasks of a lease acquired
// for a runner when it is released; the release of a lease
// acquired without one (which can have no holder session, see
// TaskStopper) asks it nothing, so that it reads no store.
func TestOnlyALeaseWithARunnerHasItsTasksStopped(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	hook := &countingStopper{}
	w.tasks = hook
	w.m = w.newManager(nil)
	req := w.req(lease.Ephemeral, "with-runner")
	req.Runner = drivers.RunnerSetOf(runnerSpec(runtime.GOARCH, "ab"))
	withRunner, err := w.m.Acquire(bg, op, req)
	if err != nil {
		t.Fatal(err)
	}
	plain := w.acquire(lease.Ephemeral, "plain")
	for _, h := range []*lease.Handle{plain, withRunner} {
		if l, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil || l.Status != lease.StatusReleased {
			t.Fatalf("Release(%s) = %v, %v", h.ID(), l, err)
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if want := []string{withRunner.ID()}; !slices.Equal(hook.asked, want) {
		t.Errorf("StopTasks was asked for %v, want %v (only the lease acquired for a runner)", hook.asked, want)
	}
}
