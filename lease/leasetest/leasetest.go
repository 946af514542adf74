// Package leasetest is the conformance suite of lease.Store. Every store
// implementation's test calls RunStoreTests with a constructor of fresh,
// empty stores, and may call BenchmarkAcquireRelease from a benchmark.
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// Sample returns a lease for tests with the given id, status and keys;
// times are whole seconds in UTC so that every store keeps them exactly.
func Sample(id string, status lease.Status, reuseKey, runKey string) *lease.Lease {
	return &lease.Lease{
		ID: id, Company: "acme", Environment: "env-1", Workspace: "/w", Run: "run-" + id,
		Status: status, Policy: lease.Ephemeral, Provider: "fake",
		AcquiredAt: t0, LastUsedAt: t0,
		Fingerprint: "sha256:abc", ReuseKey: reuseKey, RunKey: runKey,
		Config:   config.Config{"image": "busybox", "api_key": config.SecretRef{ID: "s1", Version: 2}},
		Labels:   map[string]string{"berth.lease": id, "berth.instance": "i1"},
		Metadata: map[string]string{"k": "v"},
	}
}

var cmpLease = cmp.Options{
	cmpopts.IgnoreFields(lease.Lease{}, "Config"),
	cmpopts.EquateEmpty(),
}

// RunStoreTests runs the lease.Store conformance suite against stores made
// by newStore, which returns a fresh, empty store for each subtest.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) lease.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s lease.Store)
	}{
		{"insert then get round-trips the record", testRoundTrip},
		{"insert refuses a taken id without a holder", testDuplicateID},
		{"one reuse key is held by one lease (LEASE-8)", testReuseKeyUnique},
		{"one run key is held by one lease (LEASE-8)", testRunKeyUnique},
		{"update is compare-and-set on the version", testUpdateCAS},
		{"update refuses a key another lease holds", testUpdateKeyConflict},
		{"a cleared key can be taken again", testKeyReuse},
		{"find by key", testFind},
		{"list filters and orders", testList},
		{"claim excludes other owners until it expires (LEASE-10)", testClaim},
		{"claim for sweep picks the leases that need one", testClaimForSweep},
		{"claim for release also writes the expiry of an active or retained lease", testClaimForRelease},
		{"concurrent inserts of one reuse key: one wins (LEASE-8, LEASE-10)", testConcurrentInsert},
		{"concurrent sweeps claim disjoint leases (LEASE-10)", testConcurrentSweepClaims},
		{"returned leases are copies", testCopies},
		{"the live filter matches leases that have not ended", testLiveFilter},
		{"delete is compare-and-set on the version", testDelete},
		{"prune removes ended leases released before the cutoff", testPrune},
		{"adopt turns the oldest matching pooled member into the adopting lease", testAdoptPooled},
		{"concurrent adoptions take each member once (LEASE-10)", testConcurrentAdopt},
		{"pooled members are live and not swept", testPooledLive},
		{"an insert within quotas counts the company's live leases in the same step (issue 51)", testInsertWithinQuota},
		{"20 concurrent inserts of one company against a quota of 4: exactly 4 are written (issue 51)", testConcurrentInsertsWithinQuota},
		{"an adoption within quotas counts the adopting company's live leases (issue 51)", testAdoptWithinQuota},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStore(t))
		})
	}
}

func mustInsert(t *testing.T, s lease.Store, l *lease.Lease) *lease.Lease {
	t.Helper()
	if _, err := s.InsertLease(context.Background(), l, lease.Quotas{}); err != nil {
		t.Fatalf("InsertLease(%s): %v", l.ID, err)
	}
	return l
}

func mustGet(t *testing.T, s lease.Store, id string) *lease.Lease {
	t.Helper()
	l, err := s.GetLease(context.Background(), id)
	if err != nil {
		t.Fatalf("GetLease(%s): %v", id, err)
	}
	return l
}

func testRoundTrip(t *testing.T, s lease.Store) {
	ctx := context.Background()
	in := Sample("l1", lease.StatusActive, "rk", "")
	in.ProviderLeaseID = "p-1"
	in.ExpiresAt = t0.Add(time.Hour)
	in.FailureReason = "why"
	in.Cleanup, in.CleanupDisposition, in.AfterCleanup = "pending", drivers.Stop, lease.StatusReleased
	in.CleanupEvidence, in.CleanupEvidenceKind = "cgroup emptied", drivers.EvidenceCgroup
	in.Replaces, in.ReplaceReason, in.Uses = "l0", "runner_mismatch", 3
	in.ClaimedBy, in.ClaimedUntil = "o", t0.Add(time.Minute)
	in.Runner = &drivers.RunnerSpec{Binary: "/opt/berth/runner-arm64", SHA256: strings.Repeat("ab", 32), Arch: "arm64"}
	holder, err := s.InsertLease(ctx, in, lease.Quotas{})
	if err != nil || holder != nil {
		t.Fatalf("InsertLease: %v, holder %v", err, holder)
	}
	if in.Version != 1 {
		t.Errorf("Version after insert = %d, want 1", in.Version)
	}
	got := mustGet(t, s, "l1")
	if diff := cmp.Diff(in, got, cmpLease); diff != "" {
		t.Errorf("GetLease (-inserted +got):\n%s", diff)
	}
	if got.Config.String("image") != "busybox" {
		t.Errorf("config image = %q", got.Config.String("image"))
	}
	if ref, ok := got.Config.SecretRef("api_key"); !ok || ref != (config.SecretRef{ID: "s1", Version: 2}) {
		t.Errorf("config secret reference = %v, %v; want secret:s1@v2", ref, ok)
	}
	if _, err := s.GetLease(ctx, "nope"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("GetLease(missing): %v, want ErrNotFound", err)
	}
	// The runner binary is kept across updates, and a lease without one
	// reads back without one (nil, not a zero spec).
	got.Runner.SHA256 = strings.Repeat("cd", 32)
	if err := s.UpdateLease(ctx, got); err != nil {
		t.Fatalf("UpdateLease: %v", err)
	}
	if r := mustGet(t, s, "l1").Runner; r == nil || r.SHA256 != strings.Repeat("cd", 32) || r.Arch != "arm64" || r.Binary != "/opt/berth/runner-arm64" {
		t.Errorf("Runner after update = %+v, want the updated spec", r)
	}
	mustInsert(t, s, Sample("l2", lease.StatusActive, "", ""))
	if r := mustGet(t, s, "l2").Runner; r != nil {
		t.Errorf("Runner of a lease without one = %+v, want nil", r)
	}
}

func testDuplicateID(t *testing.T, s lease.Store) {
	mustInsert(t, s, Sample("l1", lease.StatusActive, "", ""))
	holder, err := s.InsertLease(context.Background(), Sample("l1", lease.StatusActive, "", ""), lease.Quotas{})
	if !errors.Is(err, errcode.ErrConflict) || holder != nil {
		t.Errorf("InsertLease(dup id): %v, holder %v; want ErrConflict, nil", err, holder)
	}
}

func testReuseKeyUnique(t *testing.T, s lease.Store) {
	mustInsert(t, s, Sample("a", lease.StatusStarting, "rk", ""))
	holder, err := s.InsertLease(context.Background(), Sample("b", lease.StatusStarting, "rk", ""), lease.Quotas{})
	if !errors.Is(err, errcode.ErrConflict) {
		t.Fatalf("InsertLease(held reuse key): %v, want ErrConflict", err)
	}
	if holder == nil || holder.ID != "a" {
		t.Errorf("holder = %v, want lease a", holder)
	}
	if _, err := s.GetLease(context.Background(), "b"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("refused lease was stored: %v", err)
	}
	mustInsert(t, s, Sample("c", lease.StatusStarting, "rk2", ""))
	mustInsert(t, s, Sample("d", lease.StatusStarting, "", ""))
	mustInsert(t, s, Sample("e", lease.StatusStarting, "", ""))
}

func testRunKeyUnique(t *testing.T, s lease.Store) {
	mustInsert(t, s, Sample("a", lease.StatusStarting, "", "run"))
	holder, err := s.InsertLease(context.Background(), Sample("b", lease.StatusStarting, "", "run"), lease.Quotas{})
	if !errors.Is(err, errcode.ErrConflict) || holder == nil || holder.ID != "a" {
		t.Errorf("InsertLease(held run key): %v, holder %v; want ErrConflict and lease a", err, holder)
	}
}

func testUpdateCAS(t *testing.T, s lease.Store) {
	ctx := context.Background()
	mustInsert(t, s, Sample("a", lease.StatusStarting, "", ""))
	l := mustGet(t, s, "a")
	copied := *l
	stale := &copied
	l.Status, l.ProviderLeaseID = lease.StatusActive, "p-1"
	if err := s.UpdateLease(ctx, l); err != nil {
		t.Fatalf("UpdateLease: %v", err)
	}
	if l.Version != 2 {
		t.Errorf("Version after update = %d, want 2", l.Version)
	}
	stale.Status = lease.StatusFailed
	if err := s.UpdateLease(ctx, stale); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("UpdateLease(stale): %v, want ErrConflict", err)
	}
	got := mustGet(t, s, "a")
	if got.Status != lease.StatusActive || got.ProviderLeaseID != "p-1" || got.Version != 2 {
		t.Errorf("after stale update: status %s, pid %q, version %d; want active, p-1, 2", got.Status, got.ProviderLeaseID, got.Version)
	}
	missing := Sample("zz", lease.StatusActive, "", "")
	missing.Version = 1
	if err := s.UpdateLease(ctx, missing); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("UpdateLease(missing): %v, want ErrNotFound", err)
	}
}

func testUpdateKeyConflict(t *testing.T, s lease.Store) {
	mustInsert(t, s, Sample("a", lease.StatusActive, "rk", "run-a"))
	mustInsert(t, s, Sample("b", lease.StatusActive, "", ""))
	for _, mod := range []func(*lease.Lease){
		func(l *lease.Lease) { l.ReuseKey = "rk" },
		func(l *lease.Lease) { l.RunKey = "run-a" },
	} {
		b := mustGet(t, s, "b")
		mod(b)
		if err := s.UpdateLease(context.Background(), b); !errors.Is(err, errcode.ErrConflict) {
			t.Errorf("UpdateLease(taking a held key): %v, want ErrConflict", err)
		}
	}
	if b := mustGet(t, s, "b"); b.ReuseKey != "" || b.RunKey != "" || b.Version != 1 {
		t.Errorf("refused update changed lease b: %+v", b)
	}
}

func testKeyReuse(t *testing.T, s lease.Store) {
	mustInsert(t, s, Sample("a", lease.StatusActive, "rk", ""))
	a := mustGet(t, s, "a")
	a.Status, a.ReuseKey = lease.StatusReleased, ""
	if err := s.UpdateLease(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	mustInsert(t, s, Sample("b", lease.StatusStarting, "rk", ""))
}

func testFind(t *testing.T, s lease.Store) {
	ctx := context.Background()
	mustInsert(t, s, Sample("a", lease.StatusActive, "rk", ""))
	mustInsert(t, s, Sample("b", lease.StatusActive, "", "run"))
	if l, err := s.FindByReuseKey(ctx, "rk"); err != nil || l.ID != "a" {
		t.Errorf("FindByReuseKey: %v, %v; want lease a", l, err)
	}
	if l, err := s.FindByRunKey(ctx, "run"); err != nil || l.ID != "b" {
		t.Errorf("FindByRunKey: %v, %v; want lease b", l, err)
	}
	for _, key := range []string{"", "other"} {
		if _, err := s.FindByReuseKey(ctx, key); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("FindByReuseKey(%q): %v, want ErrNotFound", key, err)
		}
		if _, err := s.FindByRunKey(ctx, key); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("FindByRunKey(%q): %v, want ErrNotFound", key, err)
		}
	}
}

func ids(ls []*lease.Lease) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.ID)
	}
	return out
}

func testList(t *testing.T, s lease.Store) {
	mk := func(id string, st lease.Status, env, run, pid string, at time.Duration) {
		l := Sample(id, st, "", "")
		l.Environment, l.Run, l.ProviderLeaseID, l.AcquiredAt = env, run, pid, t0.Add(at)
		mustInsert(t, s, l)
	}
	mk("c", lease.StatusActive, "e1", "r1", "p1", 0)
	mk("a", lease.StatusActive, "e1", "r2", "p2", 0)
	mk("b", lease.StatusFailed, "e2", "r1", "p3", -time.Minute)
	tests := []struct {
		f    lease.Filter
		want []string
	}{
		{lease.Filter{}, []string{"b", "a", "c"}},
		{lease.Filter{Environment: "e1"}, []string{"a", "c"}},
		{lease.Filter{Run: "r1"}, []string{"b", "c"}},
		{lease.Filter{ProviderLeaseID: "p2"}, []string{"a"}},
		{lease.Filter{Statuses: []lease.Status{lease.StatusFailed, lease.StatusExpired}}, []string{"b"}},
		{lease.Filter{Company: "other"}, []string{}},
		{lease.Filter{Company: "acme", Environment: "e2"}, []string{"b"}},
		// Live reads and reads of live statuses go through other
		// indexes than the history's in the SQL stores.
		{lease.Filter{Live: true}, []string{"a", "c"}},
		{lease.Filter{Environment: "e2", Live: true}, []string{}},
		{lease.Filter{Statuses: []lease.Status{lease.StatusActive, lease.StatusStarting}}, []string{"a", "c"}},
		{lease.Filter{Environment: "e1", Run: "r1", Statuses: []lease.Status{lease.StatusActive}}, []string{"c"}},
		{lease.Filter{ProviderLeaseID: "p3", Live: true}, []string{}},
		{lease.Filter{ProviderLeaseID: "p1", Live: true}, []string{"c"}},
		// Pages: newest first, and the first Limit of the order.
		{lease.Filter{Newest: true}, []string{"c", "a", "b"}},
		{lease.Filter{Limit: 2}, []string{"b", "a"}},
		{lease.Filter{Newest: true, Limit: 2}, []string{"c", "a"}},
		{lease.Filter{Environment: "e1", Newest: true, Limit: 1}, []string{"c"}},
		{lease.Filter{Environment: "e1", Limit: 5}, []string{"a", "c"}},
		{lease.Filter{Live: true, Newest: true, Limit: 1}, []string{"c"}},
	}
	for _, tt := range tests {
		got, err := s.ListLeases(context.Background(), tt.f)
		if err != nil {
			t.Fatalf("ListLeases(%+v): %v", tt.f, err)
		}
		if diff := cmp.Diff(tt.want, ids(got), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("ListLeases(%+v) (-want +got):\n%s", tt.f, diff)
		}
	}
}

func testClaim(t *testing.T, s lease.Store) {
	ctx := context.Background()
	mustInsert(t, s, Sample("a", lease.StatusActive, "", ""))
	l, err := s.ClaimLease(ctx, "a", "o1", t0, t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("ClaimLease(free): %v", err)
	}
	if l.ClaimedBy != "o1" || !l.ClaimedUntil.Equal(t0.Add(time.Minute)) || l.Version != 2 {
		t.Errorf("claimed lease: by %q until %s version %d", l.ClaimedBy, l.ClaimedUntil, l.Version)
	}
	held, err := s.ClaimLease(ctx, "a", "o2", t0.Add(30*time.Second), t0.Add(2*time.Minute))
	if !errors.Is(err, lease.ErrClaimed) || held == nil || held.ClaimedBy != "o1" {
		t.Errorf("ClaimLease(held by other): %v, %v; want ErrClaimed and the holder", err, held)
	}
	if _, err := s.ClaimLease(ctx, "a", "o1", t0.Add(30*time.Second), t0.Add(2*time.Minute)); err != nil {
		t.Errorf("ClaimLease(same owner): %v", err)
	}
	l, err = s.ClaimLease(ctx, "a", "o2", t0.Add(2*time.Minute), t0.Add(3*time.Minute))
	if err != nil || l.ClaimedBy != "o2" {
		t.Errorf("ClaimLease(expired claim): %v, %v; want o2", l, err)
	}
	if _, err := s.ClaimLease(ctx, "zz", "o1", t0, t0); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("ClaimLease(missing): %v, want ErrNotFound", err)
	}
}

// releaseClaimer is lease.Store's optional method.
type releaseClaimer interface {
	ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error)
}

// testClaimForRelease checks ClaimLeaseForRelease (see lease.Store), for
// stores that have it: a claim as ClaimLease makes it that also sets ExpiresAt, for active
// and retained leases only.
func testClaimForRelease(t *testing.T, s lease.Store) {
	rc, ok := s.(releaseClaimer)
	if !ok {
		t.Skip("the store has no ClaimLeaseForRelease")
	}
	ctx := context.Background()
	until := t0.Add(time.Minute)
	for _, st := range []lease.Status{lease.StatusActive, lease.StatusRetained, lease.StatusStarting, lease.StatusPendingCleanup, lease.StatusReleased} {
		in := Sample("rel-"+string(st), st, "", "")
		in.ExpiresAt = t0.Add(time.Hour)
		mustInsert(t, s, in)
		l, err := rc.ClaimLeaseForRelease(ctx, in.ID, "o1", t0, until)
		if err != nil {
			t.Fatalf("ClaimLeaseForRelease(%s): %v", st, err)
		}
		want := in.ExpiresAt
		if st == lease.StatusActive || st == lease.StatusRetained {
			want = until
		}
		if l.ClaimedBy != "o1" || !l.ClaimedUntil.Equal(until) || l.Version != in.Version+1 || !l.ExpiresAt.Equal(want) {
			t.Errorf("ClaimLeaseForRelease(%s): claimed by %q until %s, version %d, expires %s; want o1 until %s, version %d, expires %s",
				st, l.ClaimedBy, l.ClaimedUntil, l.Version, l.ExpiresAt, until, in.Version+1, want)
		}
		if got := mustGet(t, s, in.ID); !got.ExpiresAt.Equal(want) || got.Version != l.Version {
			t.Errorf("stored after ClaimLeaseForRelease(%s): expires %s version %d; want %s, %d", st, got.ExpiresAt, got.Version, want, l.Version)
		}
		held, err := rc.ClaimLeaseForRelease(ctx, in.ID, "o2", t0, until)
		if !errors.Is(err, lease.ErrClaimed) || held == nil || held.ClaimedBy != "o1" {
			t.Errorf("ClaimLeaseForRelease(%s, held by other): %v, %v; want ErrClaimed and the holder", st, held, err)
		}
	}
	if _, err := rc.ClaimLeaseForRelease(ctx, "zz", "o1", t0, until); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("ClaimLeaseForRelease(missing): %v, want ErrNotFound", err)
	}
}

func testClaimForSweep(t *testing.T, s lease.Store) {
	ctx := context.Background()
	now := t0.Add(time.Hour)
	add := func(id string, st lease.Status, reuse string, expires time.Time, claimBy string, claimUntil time.Time) {
		l := Sample(id, st, reuse, "")
		l.ExpiresAt, l.ClaimedBy, l.ClaimedUntil = expires, claimBy, claimUntil
		mustInsert(t, s, l)
	}
	past, future := now.Add(-time.Minute), now.Add(time.Minute)
	add("pending", lease.StatusPendingCleanup, "", time.Time{}, "", time.Time{})
	add("pending-claimed", lease.StatusPendingCleanup, "", time.Time{}, "other", future)
	add("pending-claim-expired", lease.StatusPendingCleanup, "", time.Time{}, "other", past)
	add("starting-crashed", lease.StatusStarting, "", time.Time{}, "dead", past)
	add("starting-live", lease.StatusStarting, "", time.Time{}, "alive", future)
	add("active-expired", lease.StatusActive, "", past, "", time.Time{})
	add("active-expires-now", lease.StatusActive, "", now, "", time.Time{})
	add("active-live", lease.StatusActive, "", future, "", time.Time{})
	add("active-no-expiry", lease.StatusActive, "", time.Time{}, "", time.Time{})
	add("retained-expired", lease.StatusRetained, "rk1", past, "", time.Time{})
	add("stopped-expired", lease.StatusReleased, "rk2", past, "", time.Time{})
	add("released-done", lease.StatusReleased, "", past, "", time.Time{})
	add("failed", lease.StatusFailed, "", past, "", time.Time{})
	add("expired", lease.StatusExpired, "", past, "", time.Time{})
	got, err := s.ClaimForSweep(ctx, "sweeper", now, now.Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"active-expired", "active-expires-now", "pending", "pending-claim-expired", "retained-expired", "starting-crashed", "stopped-expired"}
	if diff := cmp.Diff(want, ids(got), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("ClaimForSweep (-want +got):\n%s", diff)
	}
	for _, l := range got {
		if l.ClaimedBy != "sweeper" || !l.ClaimedUntil.Equal(now.Add(time.Minute)) {
			t.Errorf("lease %s: claimed by %q until %s", l.ID, l.ClaimedBy, l.ClaimedUntil)
		}
		if stored := mustGet(t, s, l.ID); stored.ClaimedBy != "sweeper" || stored.Version != l.Version {
			t.Errorf("lease %s: stored claim %q version %d, returned version %d", l.ID, stored.ClaimedBy, stored.Version, l.Version)
		}
	}
	again, err := s.ClaimForSweep(ctx, "sweeper-2", now.Add(30*time.Second), now.Add(2*time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Errorf("second sweeper claimed %v while the first claim is live", ids(again))
	}
	limited, err := s.ClaimForSweep(ctx, "sweeper-3", now.Add(5*time.Minute), now.Add(6*time.Minute), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(limited) != 2 {
		t.Errorf("ClaimForSweep(limit 2) claimed %d", len(limited))
	}
}

func testConcurrentInsert(t *testing.T, s lease.Store) {
	const n = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, conflicts := 0, 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.InsertLease(context.Background(), Sample(fmt.Sprintf("l%02d", i), lease.StatusStarting, "rk", ""), lease.Quotas{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, errcode.ErrConflict):
				conflicts++
			default:
				t.Errorf("InsertLease: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || conflicts != n-1 {
		t.Errorf("%d inserts won and %d conflicted; want 1 and %d", won, conflicts, n-1)
	}
}

func testConcurrentSweepClaims(t *testing.T, s lease.Store) {
	const n = 40
	for i := range n {
		mustInsert(t, s, Sample(fmt.Sprintf("p%02d", i), lease.StatusPendingCleanup, "", ""))
	}
	now := t0.Add(time.Hour)
	var wg sync.WaitGroup
	results := make([][]*lease.Lease, 4)
	for w := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n + 1 { // bounded: a store that re-hands leases must not hang the suite
				got, err := s.ClaimForSweep(context.Background(), fmt.Sprintf("w%d", w), now, now.Add(time.Minute), 3)
				if err != nil {
					t.Errorf("ClaimForSweep: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				results[w] = append(results[w], got...)
			}
		}()
	}
	wg.Wait()
	seen := map[string]int{}
	for _, r := range results {
		for _, l := range r {
			seen[l.ID]++
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("lease %s claimed %d times", id, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d leases claimed, want %d", len(seen), n)
	}
}

// testCopies checks the copy contract of lease.Store: scalar fields are
// copied both ways, so a caller changing what it holds changes nothing
// stored; the maps and runner are read-only values that a store may share
// but never changes in place, so a caller that assigns new ones (and
// writes them) leaves the maps it handed over, and those it read, as they
// were.
func testCopies(t *testing.T, s lease.Store) {
	ctx := context.Background()
	in := Sample("a", lease.StatusActive, "", "")
	in.Runner = &drivers.RunnerSpec{Binary: "/opt/runner", SHA256: strings.Repeat("cd", 32), Arch: "amd64"}
	inLabels, inConfig, inMeta, inRunner, runnerWas := in.Labels, in.Config, in.Metadata, in.Runner, *in.Runner
	mustInsert(t, s, in)
	// Scalars: the inserted value and a read are the caller's own.
	in.Status, in.FailureReason = lease.StatusFailed, "changed after insert"
	got := mustGet(t, s, "a")
	got.Status, got.Run = lease.StatusReleased, "changed after read"
	if again := mustGet(t, s, "a"); again.Status != lease.StatusActive || again.Run != "run-a" || again.FailureReason != "" {
		t.Errorf("store shares scalar fields with callers: status %s, run %q, failure %q", again.Status, again.Run, again.FailureReason)
	}
	// A caller that assigns new maps without writing them changes nothing.
	got.Labels, got.Metadata = map[string]string{"x": "y"}, nil
	if again := mustGet(t, s, "a"); again.Labels["berth.lease"] != "a" || again.Metadata["k"] != "v" {
		t.Errorf("an unwritten map assignment changed the store: labels %v, metadata %v", again.Labels, again.Metadata)
	}
	// Writing new maps replaces them in the store and leaves the old ones,
	// handed over at insert and read since, untouched.
	upd := mustGet(t, s, "a")
	read := mustGet(t, s, "a")
	upd.Labels = map[string]string{"berth.lease": "a", "new": "1"}
	upd.Metadata = map[string]string{"k": "v2"}
	upd.Config = config.Config{"image": "alpine"}
	upd.Runner = &drivers.RunnerSpec{Binary: "/opt/runner2", SHA256: strings.Repeat("ef", 32), Arch: "arm64"}
	if err := s.UpdateLease(ctx, upd); err != nil {
		t.Fatalf("UpdateLease: %v", err)
	}
	if _, err := s.ClaimLease(ctx, "a", "o", t0, t0.Add(time.Minute)); err != nil {
		t.Fatalf("ClaimLease: %v", err)
	}
	now := mustGet(t, s, "a")
	if now.Labels["new"] != "1" || now.Metadata["k"] != "v2" || now.Config.String("image") != "alpine" || now.Runner == nil || now.Runner.Arch != "arm64" {
		t.Errorf("update did not store the new maps: labels %v, metadata %v, config %v, runner %+v", now.Labels, now.Metadata, now.Config, now.Runner)
	}
	for name, m := range map[string]map[string]string{"inserted labels": inLabels, "read labels": read.Labels} {
		if len(m) != 2 || m["berth.lease"] != "a" || m["berth.instance"] != "i1" {
			t.Errorf("the store changed the %s in place: %v", name, m)
		}
	}
	for name, m := range map[string]map[string]string{"inserted metadata": inMeta, "read metadata": read.Metadata} {
		if len(m) != 1 || m["k"] != "v" {
			t.Errorf("the store changed the %s in place: %v", name, m)
		}
	}
	for name, c := range map[string]config.Config{"inserted config": inConfig, "read config": read.Config} {
		if len(c) != 2 || c.String("image") != "busybox" {
			t.Errorf("the store changed the %s in place: %v", name, c)
		}
	}
	if *read.Runner != runnerWas || *inRunner != runnerWas {
		t.Errorf("the store changed the runner in place: read %+v, inserted %+v, want %+v", read.Runner, inRunner, runnerWas)
	}
}
