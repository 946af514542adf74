package sqlstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers/config"
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
		if _, err := a.InsertLease(ctx, l); err != nil {
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
		upd := l.Clone()
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
		stale := upd.Clone()
		stale.FailureReason = "stale"
		if err := a.UpdateLease(ctx, stale); !errors.Is(err, lease.ErrConflict) {
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
		fin := cl.Clone()
		fin.Status, fin.RunKey, fin.ReleasedAt, fin.ClaimedBy, fin.ClaimedUntil = lease.StatusReleased, "", t0.Add(time.Second), "", time.Time{}
		if err := a.UpdateLease(ctx, fin); err != nil {
			t.Fatal(err)
		}
		check(fin)
		// The run key is free again for a new lease.
		n := &lease.Lease{ID: "lse_2", Company: "acme", Environment: "env", Status: lease.StatusStarting, Policy: lease.Ephemeral,
			Provider: "fake", RunKey: "run:1"}
		if _, err := b.InsertLease(ctx, n); err != nil {
			t.Fatalf("insert with the released run key: %v", err)
		}
	})
}
