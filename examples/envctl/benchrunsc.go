package main

import (
	"fmt"
	"os/exec"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/internal/testenv"
)

// The runsc rows (issue 56): the Docker driver under gVisor's runsc
// runtime against the same under the engine's default runtime (runc) and
// against the Docker CLI under runsc, in one run, alternated round by
// round after a round that warms every side; each value is the median of
// benchScale.runscRounds rounds, in ms. Every container has no network
// (runsc runs with --network=none on the engines berth registers it
// with). Skipped when the engine lists no runsc runtime.

// runscRuntime is the runtime name the rows run under.
const runscRuntime = "runsc"

// runscRows: a Docker lease (acquire, exec true, destroy) under runsc vs
// `docker run --rm --runtime runsc IMAGE true` and vs the same lease under
// runc; an acquisition from a warm pool of runsc sandboxes to its first
// exec, and from a warm runner pool to its first runner task, vs that
// docker run; a runner task start under runsc vs the same
// under runc and vs `docker exec CONTAINER true` on its runsc container.
func (b *bench) runscRows(t *benchTB) []benchRow {
	ctx := t.ctx
	cliBin := lookPath(t, "docker", "the docker CLI")
	cli := testenv.Docker(t)
	info, err := cli.Info(ctx)
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	if _, ok := info.Runtimes[runscRuntime]; !ok {
		t.Skipf("the Docker engine has no %s runtime (make prereqs registers Debian's runsc)", runscRuntime)
	}
	img, run := dockerImage(t)
	d := docker.New(nil)
	t.Cleanup(func() { _ = d.Close() })
	config := func(rt string) map[string]any {
		c := map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{benchLabel: run}}
		if rt != "" {
			c["runtime"] = rt
		}
		return c
	}
	normalized := func(rt string) func() time.Duration {
		cfg, err := d.Schema().Normalize(config(rt))
		if err != nil {
			t.Fatalf("docker config: %v", err)
		}
		return func() time.Duration { return dockerLease(t, d, cfg) }
	}
	gvisor, runc := normalized(runscRuntime), normalized("")
	dockerRun := func() *exec.Cmd {
		return exec.CommandContext(ctx, cliBin, "run", "--rm", "--runtime", runscRuntime, "--network", "none", "--label", benchLabel+"="+run, img.Ref, "true")
	}
	n := b.scale.runscRounds
	var ours, anchor, underRunc []time.Duration
	for i := range n + 1 { // round 0 warms every side
		live(t)
		o, a, r := gvisor(), timed(t, dockerRun()), runc()
		if i > 0 {
			ours, anchor, underRunc = append(ours, o), append(anchor, a), append(underRunc, r)
		}
	}
	leaseRow := fmt.Sprintf("docker lease under runsc (acquire, exec true, destroy), median of %d", n)
	rows := []benchRow{
		row(t, leaseRow, "docker run --rm --runtime runsc IMAGE true", "ms", msOf(median(ours)), msOf(median(anchor))),
		row(t, leaseRow, "the same lease under runc", "ms", msOf(median(ours)), msOf(median(underRunc))),
	}

	pooled, runs := b.poolAcquisitions(t, "bench-runsc-pool", config(runscRuntime), n, dockerRun)
	rows = append(rows, row(t, fmt.Sprintf("docker pool under runsc: acquire to first exec, median of %d", n),
		"docker run --rm --runtime runsc IMAGE true", "ms", msOf(median(pooled)), msOf(median(runs))))
	pooled, runs = b.runnerPoolAcquisitions(t, "bench-runsc-runner-pool", config(runscRuntime), n, dockerRun)
	rows = append(rows, row(t, fmt.Sprintf("docker runner pool under runsc: acquire to first task, median of %d", n),
		"docker run --rm --runtime runsc IMAGE true", "ms", msOf(median(pooled)), msOf(median(runs))))

	ra := b.attachRunner(t, d, config(runscRuntime), 0)
	rc := b.attachRunner(t, d, config(""), 0)
	execIn := func() *exec.Cmd { return exec.CommandContext(ctx, cliBin, "exec", ra.h.SandboxID(), "true") }
	var tasks, tasksRunc, execs []time.Duration
	for i := range b.scale.tasks + 1 { // round 0 connects both runners
		live(t)
		o, r, e := ra.task(t, "true"), rc.task(t, "true"), timed(t, execIn())
		if i > 0 {
			tasks, tasksRunc, execs = append(tasks, o), append(tasksRunc, r), append(execs, e)
		}
	}
	taskRow := fmt.Sprintf("runner task start (true) under runsc, median of %d", b.scale.tasks)
	return append(rows,
		row(t, taskRow, "the same task under runc", "ms", msOf(median(tasks)), msOf(median(tasksRunc))),
		row(t, taskRow, "docker exec CONTAINER true (runsc)", "ms", msOf(median(tasks)), msOf(median(execs))))
}

// dockerLease is one Docker lease on d: Acquire, Exec "true", Release
// with Destroy and its receipt; it returns how long it took.
func dockerLease(t *benchTB, d drivers.Driver, cfg map[string]any) time.Duration {
	ctx := t.ctx
	start := time.Now()
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "bench"})
	if err != nil {
		t.Fatalf("docker acquire: %v", err)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("docker exec true: %v %+v", err, res)
	}
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		t.Fatalf("docker destroy: %v %+v", err, r)
	}
	return time.Since(start)
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / 1e6 }
