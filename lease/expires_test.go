package lease_test

import (
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/lease"
)

// AcquireRequest.Expires bounds the lease instead of the lease TTL (a
// host's run deadline plus a margin): the record says so, a Sweep before
// it leaves the lease alone, and a Sweep after it expires the lease and
// destroys its sandbox; a lease acquired without it still lasts the TTL.
func TestAcquireExpiresBoundsTheLease(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	until := w.clk.Now().Add(10 * time.Minute)
	req := w.req(lease.Ephemeral, "bounded")
	req.Expires = until
	h, err := w.m.Acquire(bg, op, req)
	if err != nil {
		t.Fatal(err)
	}
	other := w.acquire(lease.Ephemeral, "unbounded")
	if got := w.get(h.ID()).ExpiresAt; !got.Equal(until) {
		t.Errorf("ExpiresAt %s, want %s", got, until)
	}
	w.clk.Advance(9 * time.Minute)
	if rep, err := w.m.Sweep(bg, op); err != nil || rep.Expired != 0 {
		t.Fatalf("a sweep before Expires: %+v, %v", rep, err)
	}
	w.clk.Advance(2 * time.Minute)
	if rep, err := w.m.Sweep(bg, op); err != nil || rep.Expired != 1 {
		t.Fatalf("a sweep after Expires: %+v, %v", rep, err)
	}
	if l := w.get(h.ID()); l.Status != lease.StatusExpired || w.state(l.ProviderLeaseID) != drivers.StateDestroyed {
		t.Errorf("the bounded lease after Expires: %s, sandbox %s", l.Status, w.state(l.ProviderLeaseID))
	}
	if l := w.get(other.ID()); l.Status != lease.StatusActive {
		t.Errorf("the lease without Expires: %s, want active until the TTL", l.Status)
	}
}
