package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// RunBenchmarks runs the driver benchmarks on one Harness made by
// newHarness (the same HarnessMaker as for RunConformanceTests):
//
//   - exec: Exec of "echo x" on one held sandbox (the anchor);
//   - acquire_exec_release: Acquire, Exec "echo x", Release(destroy), and
//     the metric x_exec, its time per operation divided by the exec
//     anchor's measured in the same run (no absolute times are asserted).
func RunBenchmarks(b *testing.B, newHarness HarnessMaker) {
	ctx := context.Background()
	h, err := newHarness(ctx, b)
	if err != nil {
		b.Fatalf("harness: %v", err)
	}
	defer h.Close()
	anchor := func(n int) time.Duration {
		sb, err := h.Driver().Acquire(ctx, h.Config(), drivers.AcquireRequest{})
		if err != nil {
			b.Fatalf("Acquire: %v", err)
		}
		defer sb.Release(ctx, drivers.Destroy)
		start := time.Now()
		for range n {
			if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}}); err != nil {
				b.Fatalf("Exec: %v", err)
			}
		}
		return time.Since(start) / time.Duration(n)
	}
	b.Run("exec", func(b *testing.B) {
		sb, err := h.Driver().Acquire(ctx, h.Config(), drivers.AcquireRequest{})
		if err != nil {
			b.Fatalf("Acquire: %v", err)
		}
		defer sb.Release(ctx, drivers.Destroy)
		b.ResetTimer()
		for b.Loop() {
			if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}}); err != nil {
				b.Fatalf("Exec: %v", err)
			}
		}
	})
	b.Run("acquire_exec_release", func(b *testing.B) {
		per := anchor(20)
		start := time.Now()
		n := 0
		for b.Loop() {
			if err := acquireExecRelease(ctx, h, n); err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n > 0 && per > 0 {
			b.ReportMetric(float64(time.Since(start)/time.Duration(n))/float64(per), "x_exec")
		}
	})
}
