package berth_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/runnerbin"
)

// issue 26: a Docker container's runner bind mount is fixed when it is
// created, so a reusable lease acquired again for another runner binary
// is not resumed: the acquisition replaces the stopped container
// (ReplaceRunnerMismatch recorded on the new lease) and the runner that
// says hello is the new binary, never the old one; acquired again for
// the same binary, the container is resumed. Attach takes the binary
// from the lease record.
func TestAReusedDockerSandboxOfAnotherRunnerIsReplaced(t *testing.T) {
	t.Parallel()
	tg := dockerTarget(t)
	bin := testenv.RunnerBinary(t)
	// Another binary: the same runner with a trailing byte (another
	// SHA-256; the ELF loader ignores what follows the segments).
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "berth-runner-2")
	if err := os.WriteFile(other, append(b, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	v, err := sys.Catalog().Create(ctx, realOperator, environment.CreateRequest{Name: "reuse", Driver: tg.driver, Config: tg.config})
	if err != nil {
		t.Fatal(err)
	}
	// run acquires the reusable lease for the runner at path, runs a task
	// through it, stops the container and returns the lease record and the
	// hello's binary sum.
	run := func(path, runID string) (*lease.Lease, string) {
		t.Helper()
		set, err := controller.RunnerSetFromFiles(path)
		if err != nil {
			t.Fatal(err)
		}
		h, err := sys.Leases().Acquire(ctx, realOperator, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: runID, Policy: lease.ReuseByEnvironment, Runner: set})
		if err != nil {
			t.Fatal(err)
		}
		att, err := berth.Runners(sys).Attach(ctx, realOperator, h, controller.AttachRequest{})
		if err != nil {
			t.Fatal(err)
		}
		task, err := att.Start(ctx, realOperator, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"true"}}})
		if err != nil {
			t.Fatal(err)
		}
		if exit, err := task.Wait(ctx); err != nil || exit.Code != 0 {
			t.Fatalf("task = %+v, %v", exit, err)
		}
		sum := att.Hello().BinarySHA256
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Stop}); err != nil {
			t.Fatal(err)
		}
		l, err := sys.Leases().Get(ctx, realOperator, h.ID())
		if err != nil {
			t.Fatal(err)
		}
		return l, sum
	}
	first, sum1 := run(bin, "run-1")
	same, sumSame := run(bin, "run-2")
	if same.ID != first.ID || same.ProviderLeaseID != first.ProviderLeaseID || sumSame != sum1 {
		t.Errorf("the same binary got lease %s (container %s, runner %s), want %s resumed (%s, %s)",
			same.ID, same.ProviderLeaseID, sumSame, first.ID, first.ProviderLeaseID, sum1)
	}
	repl, sum2 := run(other, "run-3")
	want, err := runnerbin.Spec(other)
	if err != nil {
		t.Fatal(err)
	}
	if repl.ID == first.ID || repl.ProviderLeaseID == first.ProviderLeaseID {
		t.Fatalf("another binary resumed lease %s (container %s)", repl.ID, repl.ProviderLeaseID)
	}
	if repl.Replaces != first.ID || repl.ReplaceReason != "runner_mismatch" {
		t.Errorf("the replacement records replaces %q for %q, want %s for %s", repl.Replaces, repl.ReplaceReason, first.ID, "runner_mismatch")
	}
	if sum2 != want.SHA256 || sum2 == sum1 || repl.Runner == nil || repl.Runner.SHA256 != want.SHA256 {
		t.Errorf("the replacement's runner said sha256 %s (lease records %+v), want the new binary's %s", sum2, repl.Runner, want.SHA256)
	}
	if _, err := testenv.Docker(t).ContainerInspect(ctx, first.ProviderLeaseID); err == nil {
		t.Errorf("the old container %s is still there", first.ProviderLeaseID)
	}
}
