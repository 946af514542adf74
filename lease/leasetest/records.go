package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// testLiveFilter: Filter.Live matches the leases that have not ended.
func testLiveFilter(t *testing.T, s lease.Store) {
	mk := func(id string, st lease.Status, reuse string) {
		l := Sample(id, st, reuse, "")
		mustInsert(t, s, l)
	}
	mk("starting", lease.StatusStarting, "")
	mk("active", lease.StatusActive, "")
	mk("retained", lease.StatusRetained, "")
	mk("pending", lease.StatusPendingCleanup, "")
	mk("stopped", lease.StatusReleased, "k1")
	mk("released", lease.StatusReleased, "")
	mk("expired", lease.StatusExpired, "")
	mk("failed", lease.StatusFailed, "")
	got, err := s.ListLeases(context.Background(), lease.Filter{Environment: "env-1", Live: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"active", "pending", "retained", "starting", "stopped"}
	if diff := cmp.Diff(want, ids(got), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("ListLeases(Live) (-want +got):\n%s", diff)
	}
	// A lease that ends leaves them, one released back to running rejoins
	// them, and a deleted one is gone.
	ctx := context.Background()
	for id, st := range map[string]lease.Status{"active": lease.StatusReleased, "released": lease.StatusActive} {
		l := mustGet(t, s, id)
		l.Status = st
		if err := s.UpdateLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteLease(ctx, "pending", mustGet(t, s, "pending").Version); err != nil {
		t.Fatal(err)
	}
	got, err = s.ListLeases(ctx, lease.Filter{Environment: "env-1", Live: true})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"released", "retained", "starting", "stopped"}
	if diff := cmp.Diff(want, ids(got), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("ListLeases(Live) after updates and a delete (-want +got):\n%s", diff)
	}
}

// testDelete: DeleteLease is compare-and-set on the version and frees the
// lease's keys.
func testDelete(t *testing.T, s lease.Store) {
	ctx := context.Background()
	l := Sample("a", lease.StatusActive, "", "run-key")
	mustInsert(t, s, l)
	if err := s.DeleteLease(ctx, "a", l.Version+1); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("DeleteLease with a stale version: %v, want ErrConflict", err)
	}
	if _, err := s.GetLease(ctx, "a"); err != nil {
		t.Fatalf("a refused delete removed the lease: %v", err)
	}
	if err := s.DeleteLease(ctx, "a", l.Version); err != nil {
		t.Fatalf("DeleteLease: %v", err)
	}
	if _, err := s.GetLease(ctx, "a"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("GetLease after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteLease(ctx, "a", l.Version); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("DeleteLease of a missing lease: %v, want ErrNotFound", err)
	}
	if _, err := s.InsertLease(ctx, Sample("b", lease.StatusActive, "", "run-key"), lease.Quotas{}); err != nil {
		t.Errorf("the run key of a deleted lease is still held: %v", err)
	}
}

// testPrune: PruneLeases removes ended leases released before the cutoff,
// up to the limit, oldest first, and nothing else.
func testPrune(t *testing.T, s lease.Store) {
	ctx := context.Background()
	mk := func(id string, st lease.Status, reuse string, released time.Duration) {
		l := Sample(id, st, reuse, "")
		if released != 0 {
			l.ReleasedAt = t0.Add(released)
		}
		mustInsert(t, s, l)
	}
	mk("old-released", lease.StatusReleased, "", -3*time.Hour)
	mk("old-expired", lease.StatusExpired, "", -2*time.Hour)
	mk("old-failed", lease.StatusFailed, "", -time.Hour)
	mk("new-released", lease.StatusReleased, "", time.Hour)
	mk("old-stopped", lease.StatusReleased, "k1", -3*time.Hour) // resumable: not ended
	mk("old-pending", lease.StatusPendingCleanup, "", -3*time.Hour)
	mk("active", lease.StatusActive, "", 0)
	mk("no-release-time", lease.StatusFailed, "", 0)
	// Ended and claimed (a sweep working on it): pruned once the claim
	// is over.
	mk("claimed", lease.StatusFailed, "", -3*time.Hour)
	if _, err := s.ClaimLease(ctx, "claimed", "sweeper", t0.Add(-time.Minute), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Ended by an update rather than inserted ended.
	later := mustInsert(t, s, Sample("ended-later", lease.StatusActive, "", ""))
	later.Status, later.ReleasedAt = lease.StatusExpired, t0.Add(-30*time.Minute)
	if err := s.UpdateLease(ctx, later); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneLeases(ctx, t0, 2)
	if err != nil || n != 2 {
		t.Fatalf("PruneLeases(limit 2) = %d, %v; want 2", n, err)
	}
	// The oldest releases went first.
	for id, want := range map[string]bool{"old-released": false, "old-expired": false, "old-failed": true, "claimed": true} {
		if _, err := s.GetLease(ctx, id); (err == nil) != want {
			t.Errorf("after pruning the two oldest releases, lease %s: %v (want it kept: %t)", id, err, want)
		}
	}
	n, err = s.PruneLeases(ctx, t0, 0)
	if err != nil || n != 2 {
		t.Fatalf("PruneLeases(no limit) = %d, %v; want 2 (old-failed, ended-later)", n, err)
	}
	got, err := s.ListLeases(ctx, lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"active", "claimed", "new-released", "no-release-time", "old-pending", "old-stopped"}
	if diff := cmp.Diff(want, ids(got), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("leases after pruning (-want +got):\n%s", diff)
	}
	// Two hours on, the claim is over and new-released is old too.
	if n, err := s.PruneLeases(ctx, t0.Add(2*time.Hour), 0); err != nil || n != 2 {
		t.Errorf("PruneLeases(2h later) = %d, %v; want 2 (claimed, new-released)", n, err)
	}
}
