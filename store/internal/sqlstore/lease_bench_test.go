package sqlstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/internal/sqlstore"
)

// BenchmarkLeaseAcquireRelease measures an ephemeral Acquire followed by a
// Release(Destroy) through lease.Manager with the fake driver, on each SQL
// store. The anchor, measured in the same run for the same number of
// cycles, is the same cycle on lease.NewMemoryStore(). Reported: ops/s (SQL
// store), mem_ops/s (anchor) and x_memory, the time ratio of the two (the
// cost of durable, cross-process atomic lease records).
//
//	go test -run '^$' -bench LeaseAcquireRelease ./store/internal/sqlstore/
func BenchmarkLeaseAcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"sqlite", func(tb testing.TB) string { return "sqlite://" + tb.TempDir() + "/berth.db" }},
		{"postgres", testenv.Postgres},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			db, err := sqlstore.Open(ctx, tc.url(b), sqlstore.TestOptions)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			cycle := acquireReleaseCycle(b, db)
			n := 0
			for b.Loop() {
				cycle(n)
				n++
			}
			ours := b.Elapsed()

			anchor := acquireReleaseCycle(b, lease.NewMemoryStore())
			start := time.Now()
			for i := range n {
				anchor(i)
			}
			mem := time.Since(start)
			b.ReportMetric(float64(n)/ours.Seconds(), "ops/s")
			b.ReportMetric(float64(n)/mem.Seconds(), "mem_ops/s")
			b.ReportMetric(float64(ours)/float64(mem), "x_memory")
		})
	}
}

// acquireReleaseCycle returns one acquire+release cycle on a manager over
// store with a fresh fake driver.
func acquireReleaseCycle(b testing.TB, store lease.Store) func(i int) {
	drv := fake.New(nil)
	cfg, err := drv.Schema().Normalize(map[string]any{})
	if err != nil {
		b.Fatal(err)
	}
	env := &environment.Environment{ID: "env-bench", Name: "bench", Driver: drv.Name(),
		Status: environment.StatusActive, Config: cfg, Revision: 1}
	reg := drivers.NewRegistry(drv)
	mgr, _ := leasehook.New(leasehook.Sources{Store: store, Drivers: reg, Assignments: assignmentsWith(b, reg, env)})
	m := mgr.(*lease.Manager)
	ctx := context.Background()
	return func(i int) {
		h, err := m.Acquire(ctx, leaseOperator, lease.AcquireRequest{
			Company: "acme", EnvironmentID: env.ID, Run: fmt.Sprintf("run-%d", i), Policy: lease.Ephemeral,
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			b.Fatal(err)
		}
	}
}
