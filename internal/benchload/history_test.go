package benchload_test

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/benchload"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/postgres"
	"github.com/berthdev/berth/store/sqlite"
)

var historyEnded = flag.Int("benchload.history", 2000, "ended leases of TestFillHistory's fill (the suite's size is 2,000)")

// TestFillHistory: a bulk fill is read back by the real stores as the
// leases it stands for: as many ended and live leases as asked for, in
// their environments, released within HistorySpan, and the live ones are
// what a sweep sees once they expire.
func TestFillHistory(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"sqlite", func(tb testing.TB) string { return "sqlite://" + filepath.Join(tb.TempDir(), "h.db") }},
		{"postgres", testenv.Postgres},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			url := tc.url(t)
			cfg := benchload.HistoryConfig{Ended: *historyEnded, Live: 200, Environments: 3}
			h, err := benchload.FillHistory(ctx, url, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("filled %d ended and %d live leases in %s", cfg.Ended, cfg.Live, h.Fill)
			var store lease.Store
			if tc.name == "sqlite" {
				db, err := sqlite.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				store = db.Stores().Leases
			} else {
				db, err := postgres.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				store = db.Stores().Leases
			}
			checkHistory(t, store, h)
		})
	}
}

func checkHistory(t *testing.T, store lease.Store, h benchload.History) {
	t.Helper()
	ctx := context.Background()
	all, err := store.ListLeases(ctx, lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	perEnv := map[string]int{}
	ended, live := 0, 0
	for _, l := range all {
		perEnv[l.Environment]++
		switch {
		case l.Ended():
			ended++
			if l.Status != lease.StatusReleased || l.ReleasedAt.Before(h.FilledAt.Add(-benchload.HistorySpan)) || l.ReleasedAt.After(h.FilledAt.Add(time.Second)) {
				t.Fatalf("ended lease %s: status %s released at %s, want released within %s before %s", l.ID, l.Status, l.ReleasedAt, benchload.HistorySpan, h.FilledAt)
			}
		case l.Status == lease.StatusActive && l.ProviderLeaseID != "" && l.RunKey != "":
			live++
		default:
			t.Fatalf("lease %s: status %s, provider id %q, run key %q: neither ended nor an active lease with a sandbox", l.ID, l.Status, l.ProviderLeaseID, l.RunKey)
		}
	}
	if ended != h.Ended || live != h.Live || len(all) != h.Ended+h.Live {
		t.Fatalf("read %d leases, %d ended and %d live; want %d ended and %d live", len(all), ended, live, h.Ended, h.Live)
	}
	if len(perEnv) != len(h.EnvironmentIDs) {
		t.Fatalf("leases in %d environments, want %d: %v", len(perEnv), len(h.EnvironmentIDs), perEnv)
	}
	for _, id := range h.EnvironmentIDs {
		if n := perEnv[id]; n < (h.Ended+h.Live)/len(h.EnvironmentIDs) {
			t.Fatalf("environment %s holds %d leases, want at least %d", id, n, (h.Ended+h.Live)/len(h.EnvironmentIDs))
		}
	}
	got, err := store.ListLeases(ctx, lease.Filter{Live: true})
	if err != nil || len(got) != h.Live {
		t.Fatalf("ListLeases(Live) = %d leases, %v; want %d", len(got), err, h.Live)
	}
	// Not expired: no sweep work. A year and a day on: every live lease.
	if c, err := store.ClaimForSweep(ctx, "test", time.Now(), time.Now().Add(time.Minute), 0); err != nil || len(c) != 0 {
		t.Fatalf("ClaimForSweep now = %d leases, %v; want none", len(c), err)
	}
	later := h.FilledAt.Add(366 * 24 * time.Hour)
	c, err := store.ClaimForSweep(ctx, "test", later, later.Add(time.Minute), 0)
	if err != nil || len(c) != h.Live {
		t.Fatalf("ClaimForSweep a year on = %d leases, %v; want the %d live ones", len(c), err, h.Live)
	}
}

// TestHistoryFile: the first call fills the cache, the second copies it.
func TestHistoryFile(t *testing.T) {
	ctx := context.Background()
	cache, dir := t.TempDir(), t.TempDir()
	cfg := benchload.HistoryConfig{Ended: 500, Live: 50, Environments: 2}
	first, err := benchload.HistoryFile(ctx, filepath.Join(dir, "a.db"), cache, cfg)
	if err != nil || first.Cached {
		t.Fatalf("first HistoryFile: cached %v, %v; want a fill", first.Cached, err)
	}
	second, err := benchload.HistoryFile(ctx, filepath.Join(dir, "b.db"), cache, cfg)
	if err != nil || !second.Cached || !second.FilledAt.Equal(first.FilledAt) {
		t.Fatalf("second HistoryFile: cached %v, filled at %s (first %s), %v; want the cached fill", second.Cached, second.FilledAt, first.FilledAt, err)
	}
	db, err := sqlite.Open(ctx, filepath.Join(dir, "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkHistory(t, db.Stores().Leases, second)
}
