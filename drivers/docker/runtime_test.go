package docker_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
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

// runscSandboxes counts the runsc-sandbox processes of this host: a start
// that runsc refuses leaves them behind, listed by no Docker call.
func runscSandboxes(t *testing.T) int {
	t.Helper()
	n := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range dirs {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == "runsc-sandbox" {
			n++
		}
	}
	return n
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

// subset wraps mk so that only the named subtests of the conformance suite
// run (the others are skipped, saying so), and fails t at its end when a
// name matched no subtest (a renamed subtest would drop out silently),
// unless -run chose subtests.
func subset(t *testing.T, mk drivertest.HarnessMaker, names []string) drivertest.HarnessMaker {
	t.Helper()
	var mu sync.Mutex
	want := map[string]bool{} // escaped subtest name -> seen
	for _, n := range names {
		want[strings.ReplaceAll(n, " ", "_")] = false
	}
	t.Cleanup(func() {
		if f := flag.Lookup("test.run"); f != nil && strings.Contains(f.Value.String(), "/") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for n, seen := range want {
			if !seen && !t.Skipped() {
				t.Errorf("the subset names %q, which no conformance subtest is called", n)
			}
		}
	})
	return func(ctx context.Context, tb testing.TB) (drivertest.Harness, error) {
		name := strings.TrimPrefix(tb.Name(), t.Name()+"/")
		mu.Lock()
		_, ok := want[name]
		if ok {
			want[name] = true
		}
		mu.Unlock()
		if !ok {
			tb.Skip("not in this pass's subset of the conformance suite")
		}
		return mk(ctx, tb)
	}
}

// runscParallel is the parallel subtest's width under runsc (issue 56).
const runscParallel = 4

// runscHarness is the conformance harness with runtime runsc.
type runscHarness struct{ *harness }

func (h runscHarness) Parallel() int { return runscParallel }

// The Docker driver's conformance under gVisor: the subtests of runscPass
// with runtime runsc (isolation gvisor, measured), the parallel one 4
// wide; no runsc-sandbox process is left behind.
func TestConformanceRunsc(t *testing.T) {
	t.Parallel()
	before := runscSandboxes(t)
	t.Cleanup(func() {
		// Registered before newEnv, it runs after newEnv's cleanup has
		// removed every container of the pass; runsc's own processes end
		// shortly after.
		deadline := time.Now().Add(30 * time.Second)
		for runscSandboxes(t) > before && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if after := runscSandboxes(t); after > before {
			t.Errorf("%d runsc-sandbox processes before the runsc pass, %d after: it left some behind", before, after)
		}
	})
	e := newEnv(t)
	requireRunsc(t, e)
	cfg := e.config(e.img.Ref, map[string]any{"runtime": "runsc"})
	if got := drivers.IsolationOf(e.drv, cfg); got != drivers.IsolationGVisor {
		t.Fatalf("declared isolation under runsc = %s, want gvisor", got)
	}
	drivertest.RunConformanceTests(t, subset(t, func(_ context.Context, _ testing.TB) (drivertest.Harness, error) {
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
