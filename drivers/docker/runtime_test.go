package docker_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/internal/testenv"
)

// The runtime field is an identity field without a default: a config
// without it normalizes as before (its fingerprint unchanged); runsc with
// a network other than none is refused at validation, naming the network
// field and the runtime, without I/O.
func TestRuntimeField(t *testing.T) {
	t.Parallel()
	s := docker.New(&docker.Options{Host: "unix:///nonexistent.sock"}).Schema()
	f, ok := s.Field("runtime")
	if !ok || f.Kind != config.KindIdentity || f.Default != nil {
		t.Fatalf("runtime field = %+v, %v; want an identity field without a default", f, ok)
	}
	base := map[string]any{"image": "busybox@sha256:" + strings.Repeat("a", 64)}
	cfg, err := s.Normalize(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg["runtime"]; ok {
		t.Errorf("a config without runtime normalizes with one: %v", cfg)
	}
	with := func(kv ...any) map[string]any {
		m := map[string]any{"image": base["image"]}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	if cfg, err := s.Normalize(with("runtime", "runsc")); err != nil || cfg.String("runtime") != "runsc" {
		t.Errorf("runsc with network none: %v, %v", cfg, err)
	}
	_, err = s.Normalize(with("runtime", "runsc", "network", "bridge"))
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "network" || !strings.Contains(err.Error(), "runsc") {
		t.Errorf("runsc with network bridge: err = %v, want a config error on the network field naming runsc", err)
	}
	if _, err := s.Normalize(with("runtime", "run sc;")); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("a malformed runtime name: err = %v, want ErrInvalid", err)
	}
	if _, err := s.Normalize(with("runtime", "runc", "network", "bridge")); err != nil {
		t.Errorf("runc with network bridge: %v", err)
	}
}

// requireRunsc ends the test unless the engine lists the runsc runtime
// (make test registers it: internal/cmd/dockerruntime).
func requireRunsc(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := e.cli.Info(ctx)
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	if _, ok := info.Runtimes["runsc"]; !ok {
		testenv.Missing(t, "gVisor's runsc runtime in the Docker engine", "make prereqs installs Debian's runsc and registers it (internal/cmd/dockerruntime)", nil)
	}
}

// forRuntimes runs body as two parallel subtests: "runc" with the
// engine's default runtime (no runtime field) and "runsc" with runtime
// runsc (network none); the latter needs the engine's runsc runtime
// (requireRunsc). overrides is body's own map of config fields.
func forRuntimes(t *testing.T, e *env, body func(t *testing.T, overrides map[string]any)) {
	t.Helper()
	t.Run("runc", func(t *testing.T) {
		t.Parallel()
		body(t, map[string]any{})
	})
	t.Run("runsc", func(t *testing.T) {
		t.Parallel()
		requireRunsc(t, e)
		body(t, map[string]any{"runtime": "runsc", "network": "none"})
	})
}

// runscProcesses returns the command lines of this host's gVisor
// processes (argv[0] runsc-sandbox or runsc-gofer; their comm is "exe")
// that name one of ids, the engine's container ids: their log and bundle
// paths hold the id.
func runscProcesses(ids []string) []string {
	var out []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(b), "\x00")
		if argv0 != "runsc-sandbox" && argv0 != "runsc-gofer" {
			continue
		}
		for _, id := range ids {
			if strings.Contains(string(b), id) {
				out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
				break
			}
		}
	}
	return out
}

// createdSince returns the ids of the containers with the test's run label
// that the engine created from since on (its event log, bounded by now).
func createdSince(t *testing.T, e *env, since time.Time) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, errs := e.cli.Events(ctx, events.ListOptions{
		Since: strconv.FormatInt(since.Unix(), 10), Until: strconv.FormatInt(time.Now().Unix()+1, 10),
		Filters: filters.NewArgs(filters.Arg("type", "container"), filters.Arg("event", "create"), filters.Arg("label", runLabel+"="+e.run)),
	})
	var ids []string
	for {
		select {
		case m := <-msgs:
			ids = append(ids, m.Actor.ID)
		case err := <-errs:
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("docker events: %v", err)
			}
			return ids
		}
	}
}

// removeRunContainers force-removes the containers with the test's run
// label now (newEnv's cleanup does it again, finding none).
func removeRunContainers(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", runLabel+"="+e.run))})
	if err != nil {
		t.Fatalf("list the test's containers: %v", err)
	}
	for _, c := range list {
		if err := e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "already in progress") {
			t.Errorf("remove container %s: %v", c.ID, err)
		}
	}
}

// noRunscLeft fails t when gVisor processes of the containers the test
// created since then are still running 30 seconds after its containers
// were removed: a start that runsc refuses leaves them behind, listed by
// no Docker call. Other tests' and other processes' sandboxes do not
// count.
func noRunscLeft(t *testing.T, e *env, since time.Time) {
	t.Helper()
	ids := createdSince(t, e, since)
	if len(ids) == 0 {
		t.Errorf("the engine's event log holds no container of the runsc pass")
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	left := runscProcesses(ids)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		left = runscProcesses(ids)
	}
	if len(left) > 0 {
		t.Errorf("%d gVisor processes of the pass's %d removed containers are still running:\n%s", len(left), len(ids), strings.Join(left, "\n"))
	}
}

// runscPass names the conformance subtests the runsc pass runs (issue
// 56): the core contract (drivertest's conformance.go), the signals the
// driver sends through its kill exec, the terminal, runner ingress,
// template capture and delete, and the files subtests. The rest (reuse,
// listing, the error table, the other stream subtests) exercises the
// engine's API the same way under either runtime and runs in
// TestConformance; the pass keeps make test's budget (15 minutes for the
// suite). Read-only roots and the orphan sweep run under both runtimes in
// their own tests (forRuntimes).
var runscPass = []string{
	"capabilities are static and cheap",
	"declared capabilities equal those of a live sandbox",
	"acquire exec release",
	"allocated callback",
	"acquire honours a cancelled context",
	"stdout and stderr are kept apart",
	"exit codes",
	"env and dir are honoured",
	"stdin",
	"output limit truncates",
	"exec after release",
	"cancellation stops a running command promptly",
	"parallel acquire exec release",
	"declared isolation is measured",
	"stream exec signals are the shared set",
	"terminal",
	"capture and delete template",
	"runner ingress",
	"files round trip",
	"files outside the workdir are refused",
	"files a planted symlink is not followed",
}

// runscParallel is the parallel subtest's width under runsc (issue 56).
const runscParallel = 4

// runscHarness is the conformance harness with runtime runsc.
type runscHarness struct{ *harness }

func (h runscHarness) Parallel() int { return runscParallel }

// The Docker driver's conformance under gVisor: the subtests of runscPass
// with runtime runsc (isolation gvisor, measured), the parallel one 4
// wide; no gVisor process of the pass's containers is left behind.
func TestConformanceRunsc(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	requireRunsc(t, e)
	since := time.Now().Add(-time.Second)
	// Registered after newEnv, it runs before newEnv's cleanup removes
	// the containers: it removes them itself first.
	t.Cleanup(func() {
		removeRunContainers(t, e)
		noRunscLeft(t, e, since)
	})
	cfg := e.config(e.img.Ref, map[string]any{"runtime": "runsc"})
	if got := drivers.IsolationOf(e.drv, cfg); got != drivers.IsolationGVisor {
		t.Fatalf("declared isolation under runsc = %s, want gvisor", got)
	}
	// The process scan sees a live sandbox's processes (the check at the
	// end is not vacuous).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "runsc-scan"})
	if got := runscProcesses([]string{sb.ID()}); len(got) < 2 {
		t.Errorf("a live runsc sandbox has %d gVisor processes on this host (%q), want its runsc-sandbox and runsc-gofer", len(got), got)
	}
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	drivertest.RunConformanceTests(t, testenv.Subset(t, func(_ context.Context, _ testing.TB) (drivertest.Harness, error) {
		return runscHarness{&harness{e: e, cfg: cfg}}, nil
	}, runscPass))
}

// RunnersAreHostProcesses implements drivertest.HostProcessHarness: under
// gVisor a container's processes run inside its user-space kernel, and the
// host sees only runsc's own processes.
func (h runscHarness) RunnersAreHostProcesses() bool { return false }

// A runtime the engine does not have refuses the acquisition with
// ErrUnsupported naming it, and the engine holds no container of it.
func TestUnknownRuntimeCreatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(e.img.Ref, map[string]any{"runtime": "berth-no-such-runtime"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "unknown-runtime"})
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), `"berth-no-such-runtime"`) {
		t.Fatalf("Acquire under an unknown runtime: err = %v, want ErrUnsupported naming it", err)
	}
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", runLabel+"="+e.run))})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("%d containers created, want none", len(list))
	}
}
