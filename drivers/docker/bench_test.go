package docker_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
)

// BenchmarkAcquireExecDestroyVsDockerRun measures one sandbox lifecycle
// (Acquire, Exec "true", Release(destroy)) against its anchor measured in
// the same run, `docker run --rm IMAGE true` with the same local image,
// alternating the two so that load on the machine hits both alike. It
// reports x_docker_run: the driver's mean time divided by the anchor's
// (goal: at most 1.0), and engine_calls: the Engine API calls of one more
// lease, counted after the timed loop through the counting proxy of
// TestEngineCallsPerLease (goal: 7). No absolute time is asserted.
//
//	go test -run '^$' -bench AcquireExecDestroyVsDockerRun -benchtime 10x ./drivers/docker/
func BenchmarkAcquireExecDestroyVsDockerRun(b *testing.B) {
	cliPath, err := exec.LookPath("docker")
	if err != nil {
		b.Skipf("the docker CLI is needed for the anchor: %v", err)
	}
	e := newEnv(b)
	ctx := context.Background()
	cfg := e.config(e.img.Ref, nil)
	// Make the image local for both sides.
	warm, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := warm.Release(ctx, drivers.Destroy); err != nil {
		b.Fatal(err)
	}
	var berth, anchor, acq, ex, rel time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec true: %v %+v", err, res)
		}
		t2 := time.Now()
		r, err := sb.Release(ctx, drivers.Destroy)
		if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
			b.Fatalf("destroy: %v %+v", err, r)
		}
		berth += time.Since(start)
		acq, ex, rel = acq+t1.Sub(start), ex+t2.Sub(t1), rel+time.Since(t2)

		start = time.Now()
		out, err := exec.CommandContext(ctx, cliPath, "run", "--rm", "--label", runLabel+"="+e.run, e.img.Ref, "true").CombinedOutput()
		if err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		anchor += time.Since(start)
		n++
	}
	if n > 0 && anchor > 0 {
		b.ReportMetric(float64(berth)/float64(anchor), "x_docker_run")
		b.ReportMetric(float64(berth.Milliseconds())/float64(n), "berth_ms")
		b.ReportMetric(float64(anchor.Milliseconds())/float64(n), "docker_run_ms")
		b.ReportMetric(float64(acq.Milliseconds())/float64(n), "acquire_ms")
		b.ReportMetric(float64(ex.Milliseconds())/float64(n), "exec_ms")
		b.ReportMetric(float64(rel.Milliseconds())/float64(n), "destroy_ms")
	}
	b.StopTimer()
	p := startCallProxy(b, e.cli.DaemonHost())
	pcfg := e.config(e.img.Ref, map[string]any{"host": p.host})
	runLease(b, e.drv, pcfg) // resolves the image on this host (a new cache key)
	p.take()
	runLease(b, e.drv, pcfg)
	b.ReportMetric(float64(len(p.take())), "engine_calls")
}

// BenchmarkDriver runs the shared driver benchmarks (exec anchor, then
// acquire_exec_release as a ratio to it).
func BenchmarkDriver(b *testing.B) {
	e := newEnv(b)
	cfg := e.config(e.img.Ref, nil)
	drivertest.RunBenchmarks(b, func(ctx context.Context, tb testing.TB) (drivertest.Harness, error) {
		return &harness{e: e, cfg: cfg}, nil
	})
}

// BenchmarkRunnerTaskVsDockerExec measures one task on a connected runner
// in a container (StartTask of "true" until its result is stored, through
// the ingress's unix socket) against its anchor measured in the same run,
// `docker exec CONTAINER true` on the same container, alternating the two.
// It reports speedup_vs_docker_exec: the anchor's mean time divided by the
// runner's (goal: at least 10). No absolute time is asserted.
//
//	go test -run '^$' -bench RunnerTaskVsDockerExec -benchtime 50x ./drivers/docker/
func BenchmarkRunnerTaskVsDockerExec(b *testing.B) {
	cliPath, err := exec.LookPath("docker")
	if err != nil {
		b.Skipf("the docker CLI is needed for the anchor: %v", err)
	}
	e := newEnv(b)
	ctx := context.Background()
	spec := runnerSpec(b)
	sb := e.acquire(ctx, e.config(e.img.Ref, nil), drivers.AcquireRequest{LeaseID: "lease-1", Runner: &spec})
	h := newPRPHost(b, sb, spec)
	h.launch(ctx, h.serve(ctx), "lease-1")
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	session := h.session(sctx, sb)
	att, err := h.c.Reattach(ctx, operator, session)
	if err != nil {
		b.Fatal(err)
	}
	var runner, anchor time.Duration
	n := 0
	for b.Loop() {
		id := fmt.Sprintf("c%d", n)
		start := time.Now()
		task, err := att.Start(ctx, operator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "t" + id, Argv: []string{"true"}}})
		if err != nil {
			b.Fatal(err)
		}
		exit, err := task.Wait(ctx)
		if err != nil || exit.Code != 0 {
			b.Fatalf("task %s: %+v, %v", id, exit, err)
		}
		runner += time.Since(start)

		start = time.Now()
		if out, err := exec.CommandContext(ctx, cliPath, "exec", sb.ID(), "true").CombinedOutput(); err != nil {
			b.Fatalf("docker exec: %v: %s", err, out)
		}
		anchor += time.Since(start)
		n++
	}
	if n > 0 && runner > 0 {
		b.ReportMetric(float64(anchor)/float64(runner), "speedup_vs_docker_exec")
		b.ReportMetric(float64(runner.Microseconds())/float64(n)/1000, "runner_task_ms")
		b.ReportMetric(float64(anchor.Microseconds())/float64(n)/1000, "docker_exec_ms")
	}
}
