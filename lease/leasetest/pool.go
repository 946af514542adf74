package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// pooledSample is a warm-pool member of env-1 (issue 31): the instance's,
// no keys, acquired at t0 plus age.
func pooledSample(id, fingerprint string, age time.Duration) *lease.Lease {
	l := Sample(id, lease.StatusPooled, "", "")
	l.Company, l.Run, l.Workspace, l.Metadata = authz.InstanceCompany, "", "", nil
	l.Fingerprint, l.ProviderLeaseID = fingerprint, "p-"+id
	l.AcquiredAt, l.LastUsedAt = t0.Add(age), t0.Add(age)
	return l
}

// adoption returns the adopting lease of env-1's members of fingerprint
// fp for company acme, run run, claimed by owner, acquired an hour after
// t0.
func adoption(fp, run, owner string) *lease.Lease {
	now := t0.Add(time.Hour)
	return &lease.Lease{
		Environment: "env-1", Fingerprint: fp,
		Company: "acme", Workspace: "/w", Run: run, Policy: lease.Ephemeral, RunKey: "rk-" + run,
		Metadata: map[string]string{"run": run}, AcquiredAt: now, LastUsedAt: now,
		ClaimedBy: owner, ClaimedUntil: now.Add(time.Minute),
	}
}

// testAdoptPooled: AdoptPooled takes the oldest matching member that
// nobody claims, turns it into the adopting lease (its id, provider lease
// id, labels and fingerprint kept) and never hands one member out twice;
// other fingerprints, environments, runners and statuses are left alone,
// and a held run key changes nothing.
func testAdoptPooled(t *testing.T, s lease.Store) {
	ctx := context.Background()
	mustInsert(t, s, pooledSample("young", "fp1", 2*time.Minute))
	mustInsert(t, s, pooledSample("old", "fp1", time.Minute))
	mustInsert(t, s, pooledSample("other-fp", "fp2", 0))
	oe := pooledSample("other-env", "fp1", 0)
	oe.Environment = "env-2"
	mustInsert(t, s, oe)
	withRunner := pooledSample("runner", "fp1", 0)
	withRunner.Runner = &drivers.RunnerSpec{Binary: "/bin/r", SHA256: "ab", Arch: "amd64"}
	mustInsert(t, s, withRunner)
	active := Sample("active", lease.StatusActive, "", "")
	active.Fingerprint = "fp1"
	mustInsert(t, s, active)
	claimed := pooledSample("claimed", "fp1", -time.Minute) // the oldest, but claimed
	mustInsert(t, s, claimed)
	if _, err := s.ClaimLease(ctx, "claimed", "sweeper", t0.Add(time.Hour), t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}

	ad := adoption("fp1", "r1", "adopter-1")
	got, err := s.AdoptPooled(ctx, ad, lease.Quotas{})
	if err != nil {
		t.Fatalf("AdoptPooled: %v", err)
	}
	want := pooledSample("old", "fp1", time.Minute)
	want.Status, want.Company, want.Workspace, want.Run, want.Policy, want.RunKey = lease.StatusStarting, "acme", "/w", "r1", lease.Ephemeral, "rk-r1"
	want.Metadata = map[string]string{"run": "r1"}
	want.AcquiredAt, want.LastUsedAt = ad.AcquiredAt, ad.AcquiredAt
	want.ClaimedBy, want.ClaimedUntil = "adopter-1", ad.AcquiredAt.Add(time.Minute)
	want.Version = 2
	if diff := cmp.Diff(want, got, cmpLease); diff != "" {
		t.Errorf("adopted lease (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(got, mustGet(t, s, "old"), cmpLease); diff != "" {
		t.Errorf("stored adopted lease (-returned +stored):\n%s", diff)
	}
	if k, err := s.FindByRunKey(ctx, "rk-r1"); err != nil || k.ID != "old" {
		t.Errorf("FindByRunKey after adoption: %v, %v", k, err)
	}
	// A run key already held: refused, nothing changes.
	_, err = s.AdoptPooled(ctx, adoption("fp1", "r1", "adopter-2"), lease.Quotas{})
	if !errors.Is(err, errcode.ErrConflict) {
		t.Fatalf("adoption with a held run key: %v, want ErrConflict", err)
	}
	if l := mustGet(t, s, "young"); l.Status != lease.StatusPooled || l.Version != 1 || l.Company != authz.InstanceCompany {
		t.Errorf("a refused adoption changed member young: %+v", l)
	}
	got2, err := s.AdoptPooled(ctx, adoption("fp1", "r2", "adopter-2"), lease.Quotas{})
	if err != nil || got2.ID != "young" {
		t.Fatalf("second adoption: %v, %v; want young", got2, err)
	}
	if _, err := s.AdoptPooled(ctx, adoption("fp1", "r3", "adopter-3"), lease.Quotas{}); !errors.Is(err, errcode.ErrNotFound) {
		t.Fatalf("adoption with no free member left: %v, want ErrNotFound", err)
	}
	// The runner member goes only to an adoption for that runner.
	rad := adoption("fp1", "r4", "adopter-4")
	rad.Runner = &drivers.RunnerSpec{Binary: "/bin/r", SHA256: "ab", Arch: "amd64"}
	if got, err := s.AdoptPooled(ctx, rad, lease.Quotas{}); err != nil || got.ID != "runner" || got.Runner == nil {
		t.Fatalf("runner adoption: %v, %v", got, err)
	}
	for _, id := range []string{"other-fp", "other-env", "claimed"} {
		if l := mustGet(t, s, id); l.Status != lease.StatusPooled {
			t.Errorf("member %s is %s after adoptions it does not match", id, l.Status)
		}
	}
	if l := mustGet(t, s, "active"); l.Status != lease.StatusActive || l.Version != 1 {
		t.Errorf("an active lease was touched: %+v", l)
	}
}

// testConcurrentAdopt: 16 adopters race for 5 members: each member goes to
// exactly one adoption, and the others find none (LEASE-10).
func testConcurrentAdopt(t *testing.T, s lease.Store) {
	ctx := context.Background()
	const members, adopters = 5, 16
	for i := range members {
		mustInsert(t, s, pooledSample(fmt.Sprintf("m%d", i), "fp1", time.Duration(i)*time.Second))
	}
	var mu sync.Mutex
	won := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, adopters)
	for i := range adopters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("r%d", i)
			l, err := s.AdoptPooled(ctx, adoption("fp1", run, "owner-"+run), lease.Quotas{})
			if errors.Is(err, errcode.ErrNotFound) {
				return
			}
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, dup := won[l.ID]; dup {
				errs <- fmt.Errorf("member %s adopted by %s and %s", l.ID, prev, run)
			}
			won[l.ID] = run
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(won) != members {
		t.Errorf("%d members adopted, want all %d: %v", len(won), members, won)
	}
	for id, run := range won {
		if l := mustGet(t, s, id); l.Run != run || l.Status != lease.StatusStarting || l.ClaimedBy != "owner-"+run {
			t.Errorf("member %s stored as run %s, %s, claimed by %s; adopted by %s", id, l.Run, l.Status, l.ClaimedBy, run)
		}
	}
}

// testPooledLive: pool members are live (Filter.Live) and hold their
// sandbox, and a sweep leaves them alone.
func testPooledLive(t *testing.T, s lease.Store) {
	ctx := context.Background()
	m := pooledSample("m", "fp1", 0)
	m.ExpiresAt = t0 // pool members age by the pool's max age, not by sweeps
	mustInsert(t, s, m)
	got, err := s.ListLeases(ctx, lease.Filter{Environment: "env-1", Live: true})
	if err != nil || len(got) != 1 {
		t.Fatalf("ListLeases(Live) = %v, %v; want the member", got, err)
	}
	if got[0].Status != lease.StatusPooled || got[0].Ended() {
		t.Errorf("a member holds no sandbox or ended: %+v", got[0])
	}
	swept, err := s.ClaimForSweep(ctx, "sweeper", t0.Add(time.Hour), t0.Add(2*time.Hour), 0)
	if err != nil || len(swept) != 0 {
		t.Errorf("ClaimForSweep = %v, %v; want no member", swept, err)
	}
}
