package tcbench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
)

// runLabel marks every container of one run, so that cleanup finds them.
const runLabel = "test.berth/run"

// idleScript is the command berth's Docker driver gives its containers
// (drivers/docker: the container stays up for execs and exits on TERM):
// the testcontainers-go container runs the same one, so that both sides
// start, exec in and stop the same process.
const idleScript = `trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done`

// BenchmarkDockerLeaseVsTestcontainers times, in one run and alternating
// in every iteration (each iteration starting with the next side) so that
// load on the machine hits all sides alike:
//
//   - the anchor, `docker run --rm IMAGE true` with the docker CLI;
//   - a testcontainers-go container: create and start (testcontainers.Run),
//     exec `true`, terminate (Ryuk disabled: no image can be pulled here);
//   - berth's Docker driver: Acquire, Exec `true`, Release(destroy), the
//     sandbox lifecycle of drivers/docker's own benchmark;
//   - a berth lease through the lease manager (memory store): Acquire,
//     Exec `true`, Release(destroy), with its write-ahead record and receipt.
//
// It reports each side's mean in ms and its ratio to the anchor (x_docker_run:
// goal at most 1.0 for berth, and ahead of testcontainers-go). No time is
// asserted. The image is the busybox image the Docker tests build and push
// to a loopback registry, made local for every side before the loop.
//
//	cd internal/tcbench && BERTH_REQUIRE_REAL=1 go test -run '^$' -bench . -benchtime 10x
func BenchmarkDockerLeaseVsTestcontainers(b *testing.B) {
	cliPath, err := exec.LookPath("docker")
	if err != nil {
		testenv.Missing(b, "docker CLI", "install docker.io (the anchor is docker run)", err)
	}
	// testcontainers-go reads its configuration once; Ryuk (its reaper
	// container) would have to be pulled, and nothing can be pulled here.
	if err := os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true"); err != nil {
		b.Fatal(err)
	}
	tclog.SetDefault(tclog.NewNoopLogger()) // a line per container step otherwise
	ctx := context.Background()
	cli := testenv.Docker(b)
	reg := testenv.StartRegistry(b, nil)
	img := testimage.Busybox(b, reg, nil)
	run := randomID()
	testenv.RemoveRegistryImagesAtCleanup(b, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(b, cli, runLabel, run)

	drv := docker.New(nil)
	b.Cleanup(func() { _ = drv.Close() })
	cfg, err := drv.Schema().Normalize(map[string]any{
		"image":  img.Ref,
		"labels": map[string]any{runLabel: run},
	})
	if err != nil {
		b.Fatal(err)
	}
	m, env := leaseManager(b, drv, cfg)
	op := authz.Principal{ID: "bench", Role: authz.RoleLocalOperator}

	// Make the image local for every side (the driver pulls it by digest).
	driverLease(b, ctx, drv, cfg)

	var anchor, tc, drvT, mgrT time.Duration
	sides := []struct {
		total *time.Duration
		run   func(i int)
	}{
		{&anchor, func(int) {
			if out, err := exec.CommandContext(ctx, cliPath, "run", "--rm", "--label", runLabel+"="+run, img.Ref, "true").CombinedOutput(); err != nil {
				b.Fatalf("docker run: %v: %s", err, out)
			}
		}},
		{&tc, func(int) { testcontainersLease(b, ctx, img.Ref, run) }},
		{&drvT, func(int) { driverLease(b, ctx, drv, cfg) }},
		{&mgrT, func(i int) { managerLease(b, ctx, m, op, env, i) }},
	}
	n := 0
	for b.Loop() {
		// Each iteration starts with the next side, so that none always
		// runs right after another's teardown.
		for k := range sides {
			s := sides[(n+k)%len(sides)]
			start := time.Now()
			s.run(n)
			*s.total += time.Since(start)
		}
		n++
	}
	if n == 0 || anchor <= 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(ms(anchor), "docker_run_ms")
	b.ReportMetric(ms(tc), "testcontainers_ms")
	b.ReportMetric(ms(drvT), "berth_driver_ms")
	b.ReportMetric(ms(mgrT), "berth_lease_ms")
	b.ReportMetric(float64(tc)/float64(anchor), "x_docker_run_testcontainers")
	b.ReportMetric(float64(drvT)/float64(anchor), "x_docker_run_berth_driver")
	b.ReportMetric(float64(mgrT)/float64(anchor), "x_docker_run_berth_lease")
}

// testcontainersLease is one testcontainers-go lifecycle: create and start
// a container of ref running idleScript, exec `true` in it, terminate it.
func testcontainersLease(b *testing.B, ctx context.Context, ref, run string) {
	c, err := testcontainers.Run(ctx, ref,
		testcontainers.WithEntrypoint("/bin/sh", "-c", idleScript),
		testcontainers.WithLabels(map[string]string{runLabel: run}),
	)
	if err != nil {
		if c != nil {
			_ = c.Terminate(ctx)
		}
		b.Fatalf("testcontainers: run %s: %v", ref, err)
	}
	code, out, err := c.Exec(ctx, []string{"true"})
	if err != nil || code != 0 {
		var text []byte
		if out != nil {
			text, _ = io.ReadAll(out)
		}
		_ = c.Terminate(ctx)
		b.Fatalf("testcontainers: exec true: exit %d, %v: %s", code, err, text)
	}
	if err := c.Terminate(ctx); err != nil {
		b.Fatalf("testcontainers: terminate: %v", err)
	}
}

// driverLease is one sandbox lifecycle of berth's Docker driver, with the
// destroy proven by its receipt.
func driverLease(b *testing.B, ctx context.Context, drv docker.Driver, cfg map[string]any) {
	sb, err := drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "tcbench"})
	if err != nil {
		b.Fatalf("berth driver: acquire: %v", err)
	}
	if res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		_, _ = sb.Release(ctx, drivers.Destroy)
		b.Fatalf("berth driver: exec true: %v %+v", err, res)
	}
	if r, err := sb.Release(ctx, drivers.Destroy); err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		b.Fatalf("berth driver: destroy: %v %+v", err, r)
	}
}

// leaseManager returns a lease manager over a memory store with drv and a
// saved environment of cfg.
func leaseManager(b *testing.B, drv docker.Driver, cfg map[string]any) (*lease.Manager, *environment.Environment) {
	ctx := context.Background()
	env := &environment.Environment{ID: "tcbench-env", Name: "tcbench", Driver: drv.Name(), Status: environment.StatusActive, Config: cfg, Revision: 1}
	envs := envhook.NewMemoryStore().(environment.Store)
	if err := envs.CreateEnvironment(ctx, env, false); err != nil {
		b.Fatal(err)
	}
	reg := drivers.NewRegistry(drv)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, &envhook.Options{TestMode: true}).(*environment.Assignments)
	mgr, _ := leasehook.New(leasehook.Sources{Store: lease.NewMemoryStore(), Drivers: reg, Assignments: asg, Options: &lease.Options{InstanceID: "tcbench"}})
	m := mgr.(*lease.Manager)
	b.Cleanup(func() { _ = leasehook.Close(m) })
	return m, env
}

// managerLease is one lease through the manager: Acquire, Exec `true`,
// Release(destroy), the release confirmed by its receipt.
func managerLease(b *testing.B, ctx context.Context, m *lease.Manager, op authz.Principal, env *environment.Environment, i int) {
	h, err := m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: "tcbench-" + randomID()})
	if err != nil {
		b.Fatalf("berth lease %d: acquire: %v", i, err)
	}
	if res, err := h.Exec(ctx, lease.Command{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		_, _ = h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
		b.Fatalf("berth lease %d: exec true: %v %+v", i, err, res)
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Cleanup != "confirmed" {
		b.Fatalf("berth lease %d: release: %v (cleanup %v)", i, err, l)
	}
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
