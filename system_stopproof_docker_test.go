package berth_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// A runner task's stop proof stays complete while a non-dumpable process
// that the container runtime started runs beside the task: a second
// runner launched by a host that took the lease over, or an exec in runc's
// set-up before its execve. The runner's tag scan cannot read its
// environment, but its parent is outside the container's PID namespace,
// so it cannot be the task's. (CI once failed on it: a server restarted
// after kill -9 left a run's lease pending cleanup, "1 processes that may
// be the task's could not be read".) Real Docker engine, real runner
// binary; the process beside the task is the runner binary's relay mode,
// non-dumpable from its start, its stdin held open.
func TestStopProofPassesOverAnExecOfTheRuntimeOnDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, img, run := dockerRig(t)
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, RunnerBinary: testenv.RunnerBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "stop-proof", Driver: "docker",
		Config: map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, ops, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, WithRunner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := h.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Errorf("release: %v", err)
		}
	}()
	task, err := h.Run(ctx, lease.Command{Argv: []string{"sleep", "120"}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the relay below starts after the task

	stdin, hold := io.Pipe()
	relay := make(chan error, 1)
	go func() {
		_, err := h.Exec(ctx, lease.Command{Argv: []string{"/.berth/bin/berth-runner", "relay", "--socket", "/tmp/beside-the-task.sock"}, Stdin: stdin})
		relay <- err
	}()
	defer func() {
		hold.Close() // the relay ends with its stdin
		if err := <-relay; err != nil {
			t.Errorf("the relay beside the task: %v", err)
		}
	}()
	// The test holds only while the relay runs and root in the container
	// cannot read its environment.
	probe := `for d in /proc/[0-9]*; do if grep -q "beside-the-[t]ask" "$d/cmdline" 2>/dev/null; then
if cat "$d/environ" >/dev/null 2>&1; then echo readable; else echo unreadable; fi; fi; done`
	for {
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", probe}})
		if err != nil {
			t.Fatal(err)
		}
		if out := strings.TrimSpace(string(res.Stdout)); out == "unreadable" {
			break
		} else if out != "" {
			t.Fatalf("the relay beside the task: %q; want one process whose environment root cannot read", out)
		}
		select {
		case err := <-relay:
			t.Fatalf("the relay ended before the stop: %v", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}

	proof, err := task.Stop(ctx)
	if err != nil || !proof.Complete || len(proof.Survivors) != 0 || len(proof.Failed) != 0 {
		t.Fatalf("Stop beside a process of the runtime: %+v, %v; want a complete proof", proof, err)
	}
}
