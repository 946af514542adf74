package ssh

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
)

// harness is the conformance harness: a fresh sshd and driver per subtest.
type harness struct {
	d   *Driver
	cfg drivers.Config
}

func (h *harness) Driver() drivers.Driver { return h.d }
func (h *harness) Config() drivers.Config { return h.cfg.Clone() }
func (h *harness) Close()                 {}

func newHarness(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
	e := newEnv(tb)
	return &harness{d: e.d, cfg: e.config(tb, nil)}, nil
}

// The driver passes the conformance suite against OpenSSH's sshd.
func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (drivertest.Harness, error) {
		return newHarness(ctx, t)
	})
}

func BenchmarkDriver(b *testing.B) {
	drivertest.RunBenchmarks(b, newHarness)
}
