package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// finalWriteStore fails every update that would end a lease (released or
// pending_cleanup) while broken is set: a release whose final write fails
// even after the store's retries.
type finalWriteStore struct {
	lease.Store
	broken atomic.Bool
}

func (s *finalWriteStore) UpdateLease(ctx context.Context, l *lease.Lease) error {
	if s.broken.Load() && (l.Status == lease.StatusReleased || l.Status == lease.StatusPendingCleanup) {
		return errStoreDown
	}
	return s.Store.UpdateLease(ctx, l)
}

// claimingFinalWriteStore is a finalWriteStore that is a
// store with ClaimLeaseForRelease too (see lease.Store): the release writes
// its expiry ahead in its claim.
type claimingFinalWriteStore struct {
	*finalWriteStore
	mem interface {
		ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error)
	}
}

func (s claimingFinalWriteStore) ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error) {
	return s.mem.ClaimLeaseForRelease(ctx, id, owner, now, until)
}

func TestFailedReleaseWriteLeavesLeaseToTheSweep(t *testing.T) {
	t.Parallel()
	// Issue 11 item 4: a release whose final write fails must not leave
	// the lease active until its TTL under a claim nobody clears; the next
	// sweep after the release's claim takes it and destroys with proof.
	// With a store that has ClaimLeaseForRelease the expiry is written
	// in the claim, else by an update after it.
	for _, tc := range []struct {
		refuse, claimer bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		refuse := tc.refuse
		name := "destroy confirmed"
		if refuse {
			name = "destroy refused"
		}
		if tc.claimer {
			name += ", expiry written in the claim"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mem := lease.NewMemoryStore()
			fs := &finalWriteStore{Store: mem}
			var st lease.Store = fs
			if tc.claimer {
				st = claimingFinalWriteStore{fs, mem.(interface {
					ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error)
				})}
			}
			w := newWorld(t, worldOpts{store: st})
			h := w.acquire(lease.Ephemeral, "r")
			pid := h.SandboxID()
			if refuse {
				fakectl.Of(w.fk).RefuseStop(pid, errors.New("provider busy"))
			}
			fs.broken.Store(true)
			if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err == nil {
				t.Fatal("Release succeeded although its final write failed")
			}
			fs.broken.Store(false)
			fakectl.Of(w.fk).ClearFaults()
			if l := w.get(h.Lease().ID); l.Status != lease.StatusActive {
				t.Fatalf("stored lease %s after the failed write, want active (the write never landed)", l.Status)
			}
			// Another manager's sweep, once the release's claim expired.
			w.clk.Advance(cleanupB + 1)
			rep, err := w.newManager(nil).Sweep(bg, op)
			if err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			if rep.Expired != 1 {
				t.Errorf("sweep report %+v, want the lease expired", rep)
			}
			l := w.get(h.Lease().ID)
			if l.Status != lease.StatusExpired || l.Cleanup != "confirmed" || l.ClaimedBy != "" {
				t.Errorf("lease after the sweep: status %s cleanup %q claimed by %q; want expired, confirmed, unclaimed", l.Status, l.Cleanup, l.ClaimedBy)
			}
			if st := w.state(pid); st != drivers.StateDestroyed {
				t.Errorf("sandbox %s, want destroyed", st)
			}
		})
	}
}
