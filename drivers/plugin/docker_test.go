package plugin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// dockerHarness is the Docker driver served by internal/dockerplugin.
type dockerHarness struct {
	d      drivers.Driver
	cfg    config.Config
	kernel string
}

func (h *dockerHarness) Driver() drivers.Driver { return h.d }
func (h *dockerHarness) Config() config.Config  { return h.cfg.Clone() }
func (h *dockerHarness) Close()                 {}
func (h *dockerHarness) Parallel() int          { return 8 }

// HostKernel implements drivertest.IsolationHarness: the engine's kernel.
func (h *dockerHarness) HostKernel(context.Context) (string, error) { return h.kernel, nil }

// The Docker driver's conformance suite, against the real engine, through
// a plugin: what the plugin declares (exec, stream_exec, reuse, list,
// destroy_by_id) passes; what the protocol does not carry yet (terminal,
// capture, image identity, runner ingress, files) is not declared.
func TestDockerConformanceThroughPlugin(t *testing.T) {
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	const runLabel = "test.berth/run"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, runLabel, run)
	info, err := cli.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "dockerplugin")
	start := time.Now()
	if out, err := goBuild(bin, "github.com/berthdev/berth/drivers/plugin/internal/dockerplugin"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := plugin.Plugin{Binary: bin, SHA256: sum(bin)}
	if err := plugin.WriteManifest(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the Docker plugin and wrote its manifest in %s", time.Since(start).Round(time.Millisecond))
	d := load(t, p)
	want := drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReuse, drivers.CapList, drivers.CapDestroyByID)
	if got := d.Capabilities().Declared; got != want&docker.New(nil).Capabilities().Declared {
		t.Errorf("the Docker plugin declares %s, want %s", got, want&docker.New(nil).Capabilities().Declared)
	}
	cfg, err := d.Schema().Normalize(map[string]any{"image": img.Ref, "labels": map[string]any{runLabel: run}, "startup_timeout": "2m"})
	if err != nil {
		t.Fatal(err)
	}
	drivertest.RunConformanceTests(t, func(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
		return &dockerHarness{d: load(tb, p), cfg: cfg, kernel: info.KernelVersion}, nil
	})
}

// goBuild builds pkg into bin.
func goBuild(bin, pkg string) ([]byte, error) {
	cmd := execCommand("go", "build", "-o", bin, pkg)
	cmd.Env = os.Environ()
	return cmd.CombinedOutput()
}
