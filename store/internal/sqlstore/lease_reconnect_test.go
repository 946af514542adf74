package sqlstore_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// Issue 11 item 4: PostgreSQL drops every connection of a host between
// acquire and release (a restart or failover); the release still claims,
// destroys with proof and records the lease released, instead of failing on
// the stale connection and leaving the lease active until its TTL.
func TestReleaseAfterPostgresDroppedConnections(t *testing.T) {
	t.Parallel()
	testenv.Postgres(t) // skip or fail before building anything
	r := newReplicas(t, true)
	url := r.url
	ctx := context.Background()
	h, err := r.managers[0].Acquire(ctx, leaseOperator, lease.AcquireRequest{Company: "acme", EnvironmentID: r.env.ID, Run: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	if n := testenv.DropPostgresConnections(t, url); n == 0 {
		t.Fatal("no connection was dropped; the test would prove nothing")
	}
	l, err := r.managers[0].Release(ctx, leaseOperator, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatalf("release after the connections dropped: %v", err)
	}
	if l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Errorf("lease is %s, cleanup %s; want released, confirmed", l.Status, l.Cleanup)
	}
	testenv.DropPostgresConnections(t, url)
	stored, err := r.stores[1].GetLease(ctx, h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != lease.StatusReleased || stored.ClaimedBy != "" {
		t.Errorf("stored lease is %s claimed by %q; want released and unclaimed", stored.Status, stored.ClaimedBy)
	}
	if st, ok := fakectl.Of(r.provider.Driver).State(l.ProviderLeaseID); !ok || st != drivers.StateDestroyed {
		t.Errorf("sandbox %s is %s (known: %v), want destroyed", l.ProviderLeaseID, st, ok)
	}
}
