package main

import (
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/runnerbin"
)

// poolSize is the warm pool of the docker-pool workload.
const poolSize = 3

// dockerPoolRows: acquire of a saved Docker environment with a warm pool
// (an adoption of a started member) to its first `docker exec true`
// completed, vs `docker run --rm IMAGE true`, at p50 and p99 (issue 31).
// Before each measured lease the pool is full again (its background
// refill is not timed: it is the cost the pool moves out of the acquire);
// the lease is released with destroy after the clock stops.
func (b *bench) dockerPoolRows(t *benchTB) []benchRow {
	cliBin := lookPath(t, "docker", "the docker CLI")
	img, run := dockerImage(t)
	anchor := func() *exec.Cmd {
		return exec.CommandContext(t.ctx, cliBin, "run", "--rm", "--label", benchLabel+"="+run, img.Ref, "true")
	}
	leases := b.scale.poolLeases
	ours, theirs := b.poolAcquisitions(t, "bench-docker-pool", map[string]any{"image": img.Ref, "labels": map[string]any{benchLabel: run}}, leases, anchor)
	return []benchRow{
		row(t, fmt.Sprintf("docker pool: acquire to first exec, p50 of %d", leases), "docker run --rm IMAGE true, p50", "ms",
			pct(ours, 50), pct(theirs, 50)),
		row(t, fmt.Sprintf("docker pool: acquire to first exec, p99 of %d", leases), "docker run --rm IMAGE true, p99", "ms",
			pct(ours, 99), pct(theirs, 99)),
	}
}

// poolAcquisitions saves a Docker environment name of config with a warm
// pool of poolSize and measures leases acquisitions from it, each to its
// first `exec true` completed, alternated with anchor (after a warm-up of
// both). Before each measured lease the pool is full again (its
// background refill is not timed: it is the cost the pool moves out of
// the acquire); the lease is released with destroy after the clock stops.
func (b *bench) poolAcquisitions(t *benchTB, name string, config map[string]any, leases int, anchor func() *exec.Cmd) (ours, theirs []time.Duration) {
	ctx := t.ctx
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatalf("berth.New: %v", err)
	}
	t.Cleanup(func() { sys.Close() })
	env, err := sys.Catalog().Create(ctx, b.g.as, environment.CreateRequest{Name: name, Driver: "docker",
		Config: config, Pool: &environment.Pool{Size: poolSize}})
	if err != nil {
		t.Fatalf("save the target: %v", err)
	}
	full := b.poolFull(t, sys, env.ID)
	n := 0
	lease1 := func() time.Duration {
		n++
		start := time.Now()
		h, err := sys.Leases().Acquire(ctx, b.g.as, lease.AcquireRequest{Company: "bench", EnvironmentID: env.ID, Run: fmt.Sprintf("pool-%d", n)})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"true"}})
		took := time.Since(start)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec true: %v %+v", err, res)
		}
		if h.Lease().Labels["berth.pool"] != "member" {
			t.Fatalf("lease %d was not adopted from the pool", n)
		}
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Fatalf("release: %v", err)
		}
		return took
	}
	full()
	lease1() // warm: both sides then run from the engine's image
	timed(t, anchor())
	ours, theirs = make([]time.Duration, 0, leases), make([]time.Duration, 0, leases)
	for range leases {
		full()
		ours = append(ours, lease1())
		theirs = append(theirs, timed(t, anchor()))
	}
	return ours, theirs
}

// pct returns the p-th percentile of ds in milliseconds (nearest rank).
func pct(ds []time.Duration, p int) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i-1, 0), len(s)-1)
	return float64(s[i]) / 1e6
}

// dockerRunnerPoolRows: acquire from a runner pool (each member's runner
// launched and connected ahead) through the first Handle.Run, which takes
// the member's session over (nothing launched), to its task `true`
// completed, vs `docker run --rm IMAGE true`, p50 and p99.
func (b *bench) dockerRunnerPoolRows(t *benchTB) []benchRow {
	cliBin := lookPath(t, "docker", "the docker CLI")
	img, run := dockerImage(t)
	anchor := func() *exec.Cmd {
		return exec.CommandContext(t.ctx, cliBin, "run", "--rm", "--network", "none", "--label", benchLabel+"="+run, img.Ref, "true")
	}
	leases := b.scale.poolLeases
	ours, theirs := b.runnerPoolAcquisitions(t, "bench-docker-runner-pool",
		map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{benchLabel: run}}, leases, anchor)
	return []benchRow{
		row(t, fmt.Sprintf("docker runner pool: acquire to first task, p50 of %d", leases), "docker run --rm IMAGE true, p50", "ms",
			pct(ours, 50), pct(theirs, 50)),
		row(t, fmt.Sprintf("docker runner pool: acquire to first task, p99 of %d", leases), "docker run --rm IMAGE true, p99", "ms",
			pct(ours, 99), pct(theirs, 99)),
	}
}

// runnerPoolAcquisitions saves a Docker environment name of config with a
// runner pool of poolSize and measures leases acquisitions from it, each
// through its first Handle.Run to the task `true` completed, alternated
// with anchor after a warm-up of both (the pool full again before each,
// not timed; the lease destroyed after the clock stops).
func (b *bench) runnerPoolAcquisitions(t *benchTB, name string, config map[string]any, leases int, anchor func() *exec.Cmd) (ours, theirs []time.Duration) {
	ctx := t.ctx
	bin, err := runnerbin.Binary(ctx, runtime.GOARCH, &runnerbin.Options{Progress: func(msg string) { fmt.Fprintln(b.g.stderr, "envctl bench: "+msg) }})
	if err != nil {
		t.Skipf("no runner binary: %v", err)
	}
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, RunnerBinary: bin})
	if err != nil {
		t.Fatalf("berth.New: %v", err)
	}
	t.Cleanup(func() { sys.Close() })
	env, err := sys.Catalog().Create(ctx, b.g.as, environment.CreateRequest{Name: name, Driver: "docker",
		Config: config, Pool: &environment.Pool{Size: poolSize, Runner: true}})
	if err != nil {
		t.Fatalf("save the target: %v", err)
	}
	set, err := sys.RunnerSet()
	if err != nil {
		t.Fatalf("runner set: %v", err)
	}
	full := b.poolFull(t, sys, env.ID)
	n := 0
	lease1 := func() time.Duration {
		n++
		start := time.Now()
		h, err := sys.Leases().Acquire(ctx, b.g.as, lease.AcquireRequest{Company: "bench", EnvironmentID: env.ID, Run: fmt.Sprintf("rpool-%d", n), Runner: set})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		task, err := h.Run(ctx, lease.Command{TaskID: "t1", Argv: []string{"true"}})
		if err != nil {
			t.Fatalf("task: %v", err)
		}
		exit, err := task.Wait(ctx)
		took := time.Since(start)
		if err != nil || exit.Code != 0 {
			t.Fatalf("task true: %+v, %v", exit, err)
		}
		if h.Lease().Labels["berth.pool"] != "member" {
			t.Fatalf("lease %d was not adopted from the pool", n)
		}
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Fatalf("release: %v", err)
		}
		return took
	}
	full()
	lease1()
	timed(t, anchor())
	ours, theirs = make([]time.Duration, 0, leases), make([]time.Duration, 0, leases)
	for range leases {
		full()
		ours = append(ours, lease1())
		theirs = append(theirs, timed(t, anchor()))
	}
	return ours, theirs
}

// poolFull returns a func that waits until environment envID's pool holds
// poolSize pooled members, refilling it (not timed).
func (b *bench) poolFull(t *benchTB, sys *berth.System, envID string) func() {
	return func() {
		ctx := t.ctx
		deadline := time.Now().Add(2 * time.Minute)
		for {
			live(t)
			if _, err := sys.Leases().MaintainPools(ctx, b.g.as); err != nil {
				t.Fatalf("fill the pool: %v", err)
			}
			ls, err := sys.Leases().List(ctx, b.g.as, lease.Filter{Environment: envID, Statuses: []lease.Status{lease.StatusPooled}})
			if err != nil {
				t.Fatalf("list the pool: %v", err)
			}
			if len(ls) >= poolSize {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool has %d members after 2 minutes, want %d", len(ls), poolSize)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
