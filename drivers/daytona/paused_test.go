package daytona_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/daytonafake"
)

// Issue #13 item 5: a paused VM sandbox, and one still pausing, is resumed
// (start resumes paused sandboxes) instead of being waited for until the
// deadline; a paused sandbox can be stopped.
func TestPausedSandboxIsResumed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{SandboxClass: "linux-vm", StopDelay: 30 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := e.config(t, e.snap.ID)
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := drivers.DriverAs[drivers.Resumer](e.drv)
	for _, settle := range []bool{true, false} {
		if err := e.srv.Pause(sb.ID()); err != nil {
			t.Fatal(err)
		}
		want := "pausing"
		if settle {
			time.Sleep(40 * time.Millisecond) // past StopDelay: the next read finds it paused
			want = "paused"
		}
		if v, _ := e.srv.Sandbox(sb.ID()); v.State != want {
			t.Fatalf("after Pause the sandbox is %s, want %s", v.State, want)
		}
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		again, err := r.Resume(rctx, cfg, sb.ID())
		rcancel()
		if err != nil {
			t.Fatalf("Resume of a %s sandbox: %v", want, err)
		}
		res, err := again.Exec(ctx, drivers.Command{Argv: []string{"echo", "back"}})
		if err != nil || string(res.Stdout) != "back\n" {
			t.Fatalf("Exec after resuming a %s sandbox: %v %+v", want, err, res)
		}
	}
	// Stop accepts a paused sandbox.
	if err := e.srv.Pause(sb.ID()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)
	rc, err := sb.Release(ctx, drivers.Stop)
	if err != nil || rc.State != drivers.StateStopped || !rc.Confirmed {
		t.Fatalf("Release(Stop) of a paused sandbox: %+v, %v", rc, err)
	}
}
