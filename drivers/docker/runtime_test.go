package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// runscHang is the subtest the runsc pass skips, saying why.
const runscHang = "stream_exec_signals_are_the_shared_set"

// runscParallel is the parallel subtest's width under runsc (issue 56).
const runscParallel = 4

// runscHarness is the conformance harness with runtime runsc.
type runscHarness struct{ *harness }

func (h runscHarness) Parallel() int { return runscParallel }

// The Docker driver's conformance under gVisor: every subtest of the
// suite with runtime runsc (isolation gvisor, measured), the parallel one
// 4 wide; no runsc-sandbox process is left behind.
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
	broken := newBrokenTargets(t, e)
	drivertest.RunConformanceTests(t, func(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
		if strings.HasSuffix(tb.Name(), "/"+runscHang) {
			// Left for issue 56: under runsc (ptrace), while seven
			// commands are signalled at once, the container's main
			// process exits (status 2) within seconds and a kill exec's
			// output never ends: Signal waits until its context ends.
			// The same seven signals sent by docker exec by hand end
			// their commands and leave the container running.
			tb.Skip("under runsc the container exits while seven commands are signalled at once (issue 56)")
		}
		return runscHarness{&harness{e: e, cfg: cfg, broken: broken}}, nil
	})
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
