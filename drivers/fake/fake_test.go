package fake_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/fakectl"
)

type harness struct {
	d *fake.Driver
}

func (h *harness) Driver() drivers.Driver { return h.d }

func (h *harness) Config() config.Config {
	cfg, err := h.d.Schema().Normalize(map[string]any{"image": fake.DefaultImage})
	if err != nil {
		panic(err)
	}
	return cfg
}

func (h *harness) ConfigWithImage(id images.Identity) (config.Config, bool) {
	ref := id.String()
	if id.SnapshotID() != "" {
		ref = "snapshot:" + id.SnapshotID()
	}
	cfg := h.Config()
	cfg["image"] = ref
	return cfg, true
}

func (h *harness) Close() {}

// RunnerSpec is well-formed; the fake runs internal/runner in-process and never
// executes the binary.
func (h *harness) RunnerSpec(testing.TB) drivers.RunnerSpec {
	return drivers.RunnerSpec{Binary: "/nonexistent/berth-runner", SHA256: strings.Repeat("0", 64)}
}

// fakeAPIKey is the key of the fake built for the credential failures.
const fakeAPIKey = "fake-conformance-key"

// Broken implements drivertest.FailureHarness. The fake's provider is in
// process, so a dead control plane is an injected create fault wrapping
// drivers.ErrUnavailable, and credentials are checked by a fake built with
// an API key. It has no host keys.
func (h *harness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	raw := map[string]any{"image": fake.DefaultImage}
	switch f {
	case drivertest.FailUnreachable:
		dead := fmt.Errorf("control plane refused the connection: %w", drivers.ErrUnavailable)
		d := fake.New(nil)
		fakectl.Of(d).Inject(fakectl.Fault{Op: "create", Err: dead})
		return drivertest.Broken{Driver: d, Config: raw, Layer: drivers.ErrUnavailable}, true
	case drivertest.FailBadCredentials:
		raw["api_key"] = "not-" + fakeAPIKey
		return drivertest.Broken{Driver: fake.New(&fake.Options{APIKey: fakeAPIKey}), Config: raw}, true
	case drivertest.FailMissingCredentials:
		return drivertest.Broken{Driver: fake.New(&fake.Options{APIKey: fakeAPIKey}), Config: raw}, true
	case drivertest.FailUnknownImage:
		raw["image"] = "registry.example/berth/no-such-image:1"
		return drivertest.Broken{Config: raw}, true
	}
	return drivertest.Broken{}, false
}

// suiteScripts are the conformance suite's sh -c scripts of more than one
// command (drivertest.ScriptHandlers), as fake handlers: the fake's
// built-in sh -c runs one command.
var suiteScripts = func() map[string]fake.HandlerFunc {
	hs := map[string]fake.HandlerFunc{}
	for script, h := range drivertest.ScriptHandlers() {
		hs[script] = func(ctx context.Context, inv fake.Invocation) (int, error) {
			return h(ctx, inv.Stdin, inv.Stdout, inv.Stderr)
		}
	}
	return hs
}()

func newHarness(_ context.Context, _ testing.TB) (drivertest.Harness, error) {
	return &harness{d: fake.New(&fake.Options{Handlers: suiteScripts})}, nil
}

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, newHarness)
}

func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, newHarness) }
