package lease_test

import (
	"testing"

	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	leasetest.RunStoreTests(t, func(*testing.T) lease.Store { return lease.NewMemoryStore() })
}

// BenchmarkAcquireRelease: acquire + release per second with the fake
// driver on the memory store, against the bare driver as anchor.
func BenchmarkAcquireRelease(b *testing.B) {
	leasetest.BenchmarkAcquireRelease(b, lease.NewMemoryStore())
}
