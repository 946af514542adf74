package daytona_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/reason"
)

// Issue #13 item 2, QUAL-6, PRB-5: a pinned snapshot Daytona marked
// inactive after 14 idle days is reactivated by its id (default), and the
// acquire goes on once it is active again; the sandbox's identity is still
// that id.
func TestInactiveSnapshotIsReactivatedByID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{SnapshotDelay: 20 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.srv.AgeSnapshot(e.snap.ID, daytonafake.SnapshotIdleLimit+time.Hour); err != nil {
		t.Fatal(err)
	}
	if s, _ := e.srv.LookupSnapshot(e.snap.ID); s.State != "inactive" {
		t.Fatalf("aged snapshot is %s, want inactive", s.State)
	}
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("Acquire from an inactive snapshot: %v", err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	if n := e.srv.Calls(daytonafake.RouteActivateSnapshot); n != 1 {
		t.Errorf("%d activations, want 1", n)
	}
	if s, _ := e.srv.LookupSnapshot(e.snap.ID); s.State != "active" {
		t.Errorf("snapshot is %s after the acquire, want active", s.State)
	}
	ir, _ := drivers.SandboxAs[drivers.ImageReporter](sb, 0)
	id, err := ir.ImageIdentity(ctx)
	if want := images.MustParseIdentity("snapshot:daytona/" + e.snap.ID); err != nil || id != want {
		t.Errorf("ImageIdentity = %v, %v; want %v", id, err, want)
	}
}

// Issue #13 item 2: with reactivation switched off, an inactive snapshot is
// ErrImageInactive (code image_inactive), not ErrImageNotFound, nothing is
// activated or created; and a snapshot that goes inactive under a live
// sandbox does not change that sandbox's identity (no requalification).
func TestInactiveSnapshotWithoutReactivation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := e.config(t, e.snap.ID)
	cfg[daytona.FieldReactivateSnapshot] = false
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	if err := e.srv.AgeSnapshot(e.snap.ID, daytonafake.SnapshotIdleLimit+time.Hour); err != nil {
		t.Fatal(err)
	}
	ir, _ := drivers.SandboxAs[drivers.ImageReporter](sb, 0)
	id, err := ir.ImageIdentity(ctx)
	if want := images.MustParseIdentity("snapshot:daytona/" + e.snap.ID); err != nil || id != want {
		t.Errorf("ImageIdentity of a live sandbox whose snapshot went inactive = %v, %v; want %v", id, err, want)
	}
	creates := e.srv.Calls(daytonafake.RouteCreateSandbox)
	_, err = e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrImageInactive) || errors.Is(err, drivers.ErrImageNotFound) {
		t.Fatalf("Acquire from an inactive snapshot with reactivation off: err = %v, want ErrImageInactive only", err)
	}
	if got := reason.Of(err); got != reason.ImageInactive {
		t.Errorf("CodeOf = %s, want %s", got, reason.ImageInactive)
	}
	if !strings.Contains(err.Error(), e.snap.ID) || !strings.Contains(err.Error(), daytona.FieldReactivateSnapshot) {
		t.Errorf("error %q does not name the snapshot id and the knob", err)
	}
	if n := e.srv.Calls(daytonafake.RouteActivateSnapshot); n != 0 {
		t.Errorf("%d activations with reactivation off", n)
	}
	if got := e.srv.Calls(daytonafake.RouteCreateSandbox); got != creates {
		t.Errorf("a sandbox was requested from an inactive snapshot")
	}
}

// Issue #13 item 2: an activation the API refuses (within its cooldown
// after the deactivation) is ErrImageInactive, not retried to the deadline.
func TestInactiveSnapshotInCooldown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.srv.AgeSnapshot(e.snap.ID, daytonafake.SnapshotIdleLimit+time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrImageInactive) || ctx.Err() != nil {
		t.Fatalf("Acquire while the activation is refused: err = %v, want ErrImageInactive before the deadline", err)
	}
	if n := e.srv.Calls(daytonafake.RouteActivateSnapshot); n != 1 {
		t.Errorf("%d activations, want 1", n)
	}
}

// Issue #13 item 4: with a job-based runner the sandbox leaves snapshotting
// before the snapshot is saved (active, as persistSnapshotFromSandbox
// inserts it); Capture waits for the snapshot itself. Older runners' order
// works too.
func TestCaptureWaitsForTheSnapshot(t *testing.T) {
	t.Parallel()
	for _, old := range []bool{false, true} {
		e := newEnv(t, envOptions{knobs: daytonafake.Knobs{SnapshotDelay: 30 * time.Millisecond, SnapshotBeforeRestore: old}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := drivers.SandboxAs[drivers.Capturer](sb, 0)
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.Capture(ctx, drivers.CaptureRequest{Name: "tpl"})
		if err != nil {
			t.Fatalf("Capture (older runner order %v): %v", old, err)
		}
		if s, ok := e.srv.LookupSnapshot(id.SnapshotID()); !ok || s.State != "active" {
			t.Errorf("captured snapshot %v: %+v (found %v), want active", id, s, ok)
		}
		_, _ = sb.Release(ctx, drivers.Destroy)
		cancel()
	}
}
