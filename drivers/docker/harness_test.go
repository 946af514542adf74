package docker_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/client"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
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
	drv docker.Concrete
	tb  testing.TB
}

// newEnv needs the Docker engine and busybox-static (testenv.Missing
// otherwise). Cleanup removes the test's containers, then its images.
func newEnv(tb testing.TB) *env {
	tb.Helper()
	cli := testenv.Docker(tb)
	reg := testenv.StartRegistry(tb, nil)
	img := testimage.Busybox(tb, reg, nil)
	e := &env{cli: cli, reg: reg, img: img, run: randomID(), drv: docker.NewConcrete(nil), tb: tb}
	// Cleanups run last-registered first: containers, then images.
	testenv.RemoveRegistryImagesAtCleanup(tb, cli, reg.Host)
	testenv.RemoveImagesAtCleanup(tb, cli, runLabel, e.run)
	testenv.RemoveContainersAtCleanup(tb, cli, runLabel, e.run)
	tb.Cleanup(func() { _ = e.drv.Close() })
	return e
}

// config returns a normalized config for image ref with overrides, labelled
// with the test's run label.
func (e *env) config(ref string, overrides map[string]any) config.Config {
	e.tb.Helper()
	raw := map[string]any{
		"image":  ref,
		"labels": map[string]any{runLabel: e.run},
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
	e      *env
	cfg    config.Config
	broken *brokenTargets // nil: the harness does not offer broken configs
}

// brokenTargets are the real components behind the harness's broken
// configs: a unix socket nothing listens on, and a loopback registry that
// holds a busybox image and asks for basic auth.
type brokenTargets struct {
	deadHost string // "unix://..." with no listener
	authImg  string // pinned reference in the auth registry
}

// The credentials the auth registry accepts.
const (
	authUser     = "berth"
	authPassword = "conformance-password"
)

// newBrokenTargets starts the auth registry, pushes an image to it, then
// locks it: from then on every /v2/ request needs authUser:authPassword.
func newBrokenTargets(tb testing.TB, e *env) *brokenTargets {
	tb.Helper()
	var locked atomic.Bool
	reg := testenv.StartRegistry(tb, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); locked.Load() && (!ok || u != authUser || p != authPassword) {
				w.Header().Set("WWW-Authenticate", `Basic realm="berth-conformance"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	img := testimage.Busybox(tb, reg, nil)
	locked.Store(true)
	testenv.RemoveRegistryImagesAtCleanup(tb, e.cli, reg.Host)
	return &brokenTargets{deadHost: "unix://" + filepath.Join(tb.TempDir(), "dead.sock"), authImg: img.Ref}
}

// Broken implements drivertest.FailureHarness against the real engine: a
// host socket nothing listens on (the engine is the provider's control
// plane: ErrUnavailable), a wrong password for the auth registry, a
// registry_auth that is an unresolved secret reference, a digest the
// registry does not hold. Containers have no host keys.
func (h *harness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	if h.broken == nil {
		return drivertest.Broken{}, false
	}
	raw := map[string]any{}
	for k, v := range h.cfg {
		raw[k] = v
	}
	switch f {
	case drivertest.FailUnreachable:
		raw["host"] = h.broken.deadHost
		return drivertest.Broken{Config: raw, Layer: drivers.ErrUnavailable}, true
	case drivertest.FailBadCredentials:
		raw["image"] = h.broken.authImg
		raw["registry_auth"] = authUser + ":not-" + authPassword
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailMissingCredentials:
		raw["image"] = h.broken.authImg
		raw["registry_auth"] = map[string]any{"$secret": "conformance-registry", "version": 1}
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailUnknownImage:
		raw["image"] = h.e.reg.Host + "/berth/no-such-image@sha256:" + strings.Repeat("0", 64)
		return drivertest.Broken{Config: raw}, true
	}
	return drivertest.Broken{}, false
}

// conformanceParallel is the width of the suite's parallel subtest: the
// engine starts containers one after another, so 32 at once mostly queue.
const conformanceParallel = 8

// Parallel implements drivertest.ParallelHarness.
func (h *harness) Parallel() int { return conformanceParallel }

// RunnerSpec implements drivertest.RunnerHarness: the reference runner,
// built static once per test binary.
func (h *harness) RunnerSpec(tb testing.TB) drivers.RunnerSpec {
	p, sum := testenv.RunnerBinarySum(tb)
	return drivers.RunnerSpec{Binary: p, SHA256: sum}
}

// RunnersAreHostProcesses implements drivertest.HostProcessHarness: the
// runner ingress needs the engine's unix socket, so the containers, and
// their runners, are processes of this host.
func (h *harness) RunnersAreHostProcesses() bool { return true }

var (
	_ drivertest.HostProcessHarness = (*harness)(nil)
	_ drivertest.RunnerHarness      = (*harness)(nil)
	_ drivertest.ImageHarness       = (*harness)(nil)
	_ drivertest.FailureHarness     = (*harness)(nil)
	_ drivertest.ParallelHarness    = (*harness)(nil)
)

func (h *harness) Driver() drivers.Driver { return h.e.drv }
func (h *harness) Config() config.Config  { return h.cfg.Clone() }
func (h *harness) Close()                 {}
func (h *harness) ConfigWithImage(id images.Identity) (config.Config, bool) {
	c := h.cfg.Clone()
	c["image"] = id.String()
	return c, true
}

// TestMain removes the runner binary that RunnerBinary built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRunnerBinary()
	os.Exit(code)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(e.img.Ref, nil)
	broken := newBrokenTargets(t, e)
	drivertest.RunConformanceTests(t, func(context.Context, testing.TB) (drivertest.Harness, error) {
		return &harness{e: e, cfg: cfg, broken: broken}, nil
	})
}
