package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	leasetest.RunStoreTests(t, func(*testing.T) lease.Store { return lease.NewMemoryStore() })
}

// BenchmarkAcquireRelease: acquire + release per second with the fake
// driver on the memory store, against the bare driver as anchor, for a
// caller whose context never ends and for one whose context may (see
// leasetest.BenchmarkAcquireRelease).
//
//	go test ./lease -run '^$' -bench 'AcquireRelease$' -benchtime 3s -count 3 -benchmem
func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("ctx=background", func(b *testing.B) {
		leasetest.BenchmarkAcquireRelease(b, context.Background(), lease.NewMemoryStore())
	})
	b.Run("ctx=cancellable", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		leasetest.BenchmarkAcquireRelease(b, ctx, lease.NewMemoryStore())
	})
}

// BenchmarkMemoryStorePrune: one sweep's prune (PruneLeases, limit 100)
// of a memory store holding a history of ended leases, in a steady state
// (each iteration ends 100 more), at 100,000 ended leases against the same
// at 1,000 as anchor. x_small near 1 means pruning costs what it prunes,
// not the history.
//
//	go test ./lease -run '^$' -bench MemoryStorePrune
func BenchmarkMemoryStorePrune(b *testing.B) {
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(b *testing.B, history int) time.Duration {
		s := lease.NewMemoryStore()
		n := 0
		end := func(k int) {
			for range k {
				l := leasetest.Sample(fmt.Sprint("l", n), lease.StatusReleased, "", "")
				l.ReleasedAt = base.Add(time.Duration(n) * time.Millisecond)
				if _, err := s.InsertLease(ctx, l, lease.Quotas{}); err != nil {
					b.Fatal(err)
				}
				n++
			}
		}
		b.StopTimer()
		end(history)
		b.StartTimer()
		start := time.Now()
		for range b.N {
			end(100)
			cutoff := base.Add(time.Duration(n-history) * time.Millisecond)
			if got, err := s.PruneLeases(ctx, cutoff, 100); err != nil || got != 100 {
				b.Fatalf("PruneLeases = %d, %v; want 100", got, err)
			}
		}
		return time.Since(start)
	}
	small := run(b, 1_000)
	b.ResetTimer()
	large := run(b, 100_000)
	b.StopTimer()
	b.ReportMetric(float64(large)/float64(small), "x_small")
}
