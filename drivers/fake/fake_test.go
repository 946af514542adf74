package fake_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/images"
)

type harness struct {
	d *fake.Driver
}

func (h *harness) Driver() drivers.Driver { return h.d }

func (h *harness) Config() drivers.Config {
	cfg, err := h.d.Schema().Normalize(map[string]any{"image": fake.DefaultImage})
	if err != nil {
		panic(err)
	}
	return cfg
}

func (h *harness) ConfigWithImage(id images.Identity) (drivers.Config, bool) {
	ref := id.String()
	if id.Kind() == images.KindSnapshot {
		ref = fake.SnapshotPrefix + id.SnapshotID()
	}
	cfg := h.Config()
	cfg["image"] = ref
	return cfg, true
}

func (h *harness) Close() {}

func newHarness(_ context.Context, _ testing.TB) (drivertest.Harness, error) {
	return &harness{d: fake.New(nil)}, nil
}

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
		return newHarness(ctx, t)
	})
}

func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, newHarness) }
