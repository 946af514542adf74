package docker_test

import (
	"context"
	"testing"

	"github.com/docker/docker/client"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// runLabel is the config label (drivers' "labels" field) that marks every
// container and captured image of one test, so that cleanup finds them.
const runLabel = "test.berth/run"

// env is one test's engine, loopback registry and pushed busybox image, with
// cleanup of everything the test creates registered on tb.
type env struct {
	cli *client.Client
	reg *testenv.Registry
	img testimage.Image
	run string
	drv *docker.Driver
	tb  testing.TB
}

// newEnv needs the Docker engine and busybox-static (testenv.Missing
// otherwise). Cleanup removes the test's containers, then its images.
func newEnv(tb testing.TB) *env {
	tb.Helper()
	cli := testenv.Docker(tb)
	reg := testenv.StartRegistry(tb, nil)
	img := testimage.Busybox(tb, reg, nil)
	e := &env{cli: cli, reg: reg, img: img, run: randomID(), drv: docker.New(nil), tb: tb}
	// Cleanups run last-registered first: containers, then images.
	testenv.RemoveRegistryImagesAtCleanup(tb, cli, reg.Host)
	testenv.RemoveImagesAtCleanup(tb, cli, runLabel, e.run)
	testenv.RemoveContainersAtCleanup(tb, cli, runLabel, e.run)
	tb.Cleanup(func() { _ = e.drv.Close() })
	return e
}

// config returns a normalized config for image ref with overrides, labelled
// with the test's run label.
func (e *env) config(ref string, overrides map[string]any) drivers.Config {
	e.tb.Helper()
	raw := map[string]any{
		docker.FieldImage:  ref,
		docker.FieldLabels: map[string]any{runLabel: e.run},
		// The conformance suite starts 32 sandboxes at once while the other
		// tests run; a loaded engine starts them one after another.
		docker.FieldStartupTimeout: "2m",
	}
	for k, v := range overrides {
		raw[k] = v
	}
	cfg, err := e.drv.Schema().Normalize(raw)
	if err != nil {
		e.tb.Fatalf("config: %v", err)
	}
	return cfg
}

// harness is the conformance harness: one shared env per suite run.
type harness struct {
	e   *env
	cfg drivers.Config
}

var _ drivertest.ImageHarness = (*harness)(nil)

func (h *harness) Driver() drivers.Driver { return h.e.drv }
func (h *harness) Config() drivers.Config { return h.cfg.Clone() }
func (h *harness) Close()                 {}
func (h *harness) ConfigWithImage(id images.Identity) (drivers.Config, bool) {
	c := h.cfg.Clone()
	c[docker.FieldImage] = id.String()
	return c, true
}

func TestConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(e.img.Ref, nil)
	drivertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
		return &harness{e: e, cfg: cfg}, nil
	})
}
