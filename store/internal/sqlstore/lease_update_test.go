package sqlstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// UpdateLease sets only the columns that changed since the version this
// process last wrote (leaseRows): the rows it leaves must be exactly those
// of a full write, also when another process (a second pool) wrote the row
// in between, and a stale version is refused as before.
func TestLeaseUpdateOfChangedColumnsOnly(t *testing.T) {
	t.Parallel()
	eachDatabase(t, true, func(t *testing.T, url func(*testing.T) string) {
		ctx := context.Background()
		u := url(t)
		a, b := openTest(t, u), openTest(t, u)
		t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
		l := &lease.Lease{ID: "lse_1", Company: "acme", Environment: "env", Run: "r1", Status: lease.StatusStarting,
			Policy: lease.Ephemeral, Provider: "fake", AcquiredAt: t0, RunKey: "run:1", Fingerprint: "fp",
			Config: config.Config{"image": "x"}, Labels: map[string]string{"k": "v"}, ClaimedBy: "m#1", ClaimedUntil: t0.Add(time.Minute)}
		if _, err := a.InsertLease(ctx, l, lease.Quotas{}); err != nil {
			t.Fatal(err)
		}
		check := func(want *lease.Lease) {
			t.Helper()
			for _, db := range []*DB{a, b} {
				got, err := db.GetLease(ctx, want.ID)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Fatalf("stored lease (-want +got):\n%s", d)
				}
			}
		}
		// a writes from the version it inserted: only the changed columns.
		if _, ok := a.leaseRows.get(l.ID, 1); !ok {
			t.Fatal("the inserted row is not remembered: the update below would be a full one")
		}
		upd := cloneLease(l)
		upd.ProviderLeaseID = "fake-1"
		if err := a.UpdateLease(ctx, upd); err != nil {
			t.Fatal(err)
		}
		check(upd)
		// b, another process, changes other columns.
		other, err := b.GetLease(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		other.Status, other.Metadata, other.ClaimedBy, other.ClaimedUntil = lease.StatusActive, map[string]string{"m": "1"}, "", time.Time{}
		if err := b.UpdateLease(ctx, other); err != nil {
			t.Fatal(err)
		}
		check(other)
		// a's remembered version is stale now: refused, nothing changes.
		stale := cloneLease(upd)
		stale.FailureReason = "stale"
		if err := a.UpdateLease(ctx, stale); !errors.Is(err, errcode.ErrConflict) {
			t.Fatalf("update from a stale version: %v, want ErrConflict", err)
		}
		check(other)
		// a claims (it remembers the claimed row) and writes from there:
		// b's columns stay, a's change lands, the run key goes.
		cl, err := a.ClaimLease(ctx, l.ID, "m#2", t0, t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := a.leaseRows.get(l.ID, cl.Version); !ok {
			t.Fatal("the claimed row is not remembered")
		}
		fin := cloneLease(cl)
		fin.Status, fin.RunKey, fin.ReleasedAt, fin.ClaimedBy, fin.ClaimedUntil = lease.StatusReleased, "", t0.Add(time.Second), "", time.Time{}
		if err := a.UpdateLease(ctx, fin); err != nil {
			t.Fatal(err)
		}
		check(fin)
		// The run key is free again for a new lease.
		n := &lease.Lease{ID: "lse_2", Company: "acme", Environment: "env", Status: lease.StatusStarting, Policy: lease.Ephemeral,
			Provider: "fake", RunKey: "run:1"}
		if _, err := b.InsertLease(ctx, n, lease.Quotas{}); err != nil {
			t.Fatalf("insert with the released run key: %v", err)
		}
	})
}

// A claim of a row this process remembers reads back only its version and
// expires_at and builds the lease from the remembered one: what it returns
// must be exactly what a read of the row returns, also when another
// process wrote the row in between (the row is read again then), and a
// claim another process holds is refused as before.
func TestLeaseClaimOfRememberedRow(t *testing.T) {
	t.Parallel()
	eachDatabase(t, true, func(t *testing.T, url func(*testing.T) string) {
		ctx := context.Background()
		u := url(t)
		a, b := openTest(t, u), openTest(t, u)
		// Not UTC, and with a monotonic reading: the claimed lease's times
		// must still be a read's (UTC, no monotonic reading).
		t0 := time.Now().In(time.FixedZone("X", 3600)).Truncate(time.Microsecond)
		l := &lease.Lease{ID: "lse_1", Company: "acme", Environment: "env", Run: "r1", Status: lease.StatusStarting,
			Policy: lease.Ephemeral, Provider: "fake", AcquiredAt: t0, RunKey: "run:1", Fingerprint: "fp",
			Config: config.Config{"image": "x"}, Labels: map[string]string{"k": "v"}, Metadata: map[string]string{"m": "0"}}
		if _, err := a.InsertLease(ctx, l, lease.Quotas{}); err != nil {
			t.Fatal(err)
		}
		act := cloneLease(l)
		act.Status, act.ProviderLeaseID, act.LastUsedAt, act.ExpiresAt, act.Uses = lease.StatusActive, "fake-1", t0, t0.Add(time.Hour), 1
		if err := a.UpdateLease(ctx, act); err != nil {
			t.Fatal(err)
		}
		claimed := func(db *DB, l *lease.Lease) {
			t.Helper()
			got, err := db.GetLease(ctx, l.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(got, l); d != "" {
				t.Fatalf("claimed lease vs its row (-row +claimed):\n%s", d)
			}
			if l.AcquiredAt.Location() != time.UTC || l.ClaimedUntil.Location() != time.UTC {
				t.Fatalf("claimed lease's times are not UTC: %v, %v", l.AcquiredAt, l.ClaimedUntil)
			}
		}
		// Remembered, unchanged since: the short claim, expires_at set.
		until := t0.Add(time.Minute)
		cl, err := a.ClaimLeaseForRelease(ctx, l.ID, "m#1", t0, until)
		if err != nil {
			t.Fatal(err)
		}
		if !cl.ExpiresAt.Equal(until) || cl.ClaimedBy != "m#1" || cl.Version != 3 {
			t.Fatalf("claim: expires %v, claimed by %q, version %d; want %v, m#1, 3", cl.ExpiresAt, cl.ClaimedBy, cl.Version, until)
		}
		claimed(a, cl)
		if _, ok := a.leaseRows.get(l.ID, cl.Version); !ok {
			t.Fatal("the claimed row is not remembered")
		}
		// The claimed lease is the caller's: changing it changes nothing
		// remembered, and the next write from it sets what changed.
		cl.FailureReason, cl.ClaimedBy, cl.ClaimedUntil = "changed by its holder", "", time.Time{}
		if err := a.UpdateLease(ctx, cl); err != nil {
			t.Fatal(err)
		}
		claimed(a, cl)
		// b, another process, writes the row: a's remembered version is
		// stale, and a's claim reads the row again.
		other, err := b.GetLease(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		other.Metadata = map[string]string{"m": "1"}
		if err := b.UpdateLease(ctx, other); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.leaseRows.latest(l.ID); !ok {
			t.Fatal("a forgot the row before the claim this checks")
		}
		cl, err = a.ClaimLease(ctx, l.ID, "m#1", t0, until)
		if err != nil {
			t.Fatal(err)
		}
		if cl.Metadata["m"] != "1" {
			t.Fatalf("claim after another process's write returned metadata %v, want b's", cl.Metadata)
		}
		claimed(a, cl)
		// b claims; a, remembering its own claim's row, is refused.
		if _, err := b.ClaimLease(ctx, l.ID, "m#2", t0.Add(2*time.Minute), t0.Add(3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ClaimLease(ctx, l.ID, "m#1", t0.Add(2*time.Minute), t0.Add(3*time.Minute)); !errors.Is(err, lease.ErrClaimed) {
			t.Fatalf("claim of a lease another process holds: %v, want ErrClaimed", err)
		}
	})
}
