package drivertest

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// Harness gives the conformance suite one driver under test and a config
// that reaches a working target. A fresh Harness is made for every subtest.
type Harness interface {
	// Driver returns the driver under test.
	Driver() drivers.Driver
	// Config returns a normalized config with secrets resolved, ready for
	// Acquire, that reaches the harness's target.
	Config() config.Config
	// Close releases whatever the harness holds. It is called once, at the
	// end of the subtest.
	Close()
}

// HarnessMaker makes a fresh Harness. The same function serves
// RunConformanceTests (tb is the subtest's *testing.T) and RunBenchmarks
// (tb is the *testing.B). It may call tb.Skip when the real component the
// driver needs is unavailable, and may register cleanups on tb.
type HarnessMaker func(ctx context.Context, tb testing.TB) (Harness, error)

// defaultParallel is how many acquire-exec-release workers the parallel
// subtest runs at once when the harness does not say otherwise.
const defaultParallel = 32

// ParallelHarness is an optional interface that may be implemented by a
// Harness whose driver should be tested with fewer (or more) concurrent
// sandboxes. If a Harness does not implement it, or Parallel returns less
// than 1, the parallel subtest runs 32 workers.
type ParallelHarness interface {
	// Parallel returns how many workers the parallel subtest runs at once.
	Parallel() int
}

// RunnerHarness is the interface a Harness implements when its driver
// declares CapRunnerIngress. RunnerSpec returns the spec of a runner binary
// built for the harness's target (a static build of cmd/berth-runner, with
// its SHA-256); it may register cleanups on tb.
type RunnerHarness interface {
	RunnerSpec(tb testing.TB) drivers.RunnerSpec
}

// parallelWidth returns h's parallel width.
func parallelWidth(h Harness) int {
	if p, ok := h.(ParallelHarness); ok && p.Parallel() > 0 {
		return p.Parallel()
	}
	return defaultParallel
}
