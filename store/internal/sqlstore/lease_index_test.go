package sqlstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

// Issue 11 item 7: sweeps, usage reads and pruning read the leases they
// need through indexes, never by scanning the whole history. SQLite's
// query plans say so deterministically: no step may be a full "SCAN" of
// the leases table, and every index search narrows by status.
func TestLeaseQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db := openTest(t, sqliteURL(t))
	ctx := context.Background()
	// Some history, so that the plans are those of a used table.
	for i, st := range []lease.Status{lease.StatusReleased, lease.StatusExpired, lease.StatusFailed, lease.StatusActive} {
		l := leasetest.Sample(string(rune('a'+i)), st, "", "")
		l.ReleasedAt = time.Now()
		if _, err := db.InsertLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	now := nanos(time.Now())
	usage, usageArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Live: true})
	queries := []struct {
		name string
		q    string
		args []any
	}{
		{"sweep candidates", db.sweepPickSQL(100), []any{now, now, now, "", now}},
		{"environment usage", usage, usageArgs},
		{"prune candidates", db.prunePickSQL(100), []any{now, "", now}},
	}
	for _, q := range queries {
		rows, err := db.reads().query(ctx, "EXPLAIN QUERY PLAN "+q.q, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		t.Logf("%s:\n%s", q.name, strings.Join(plan, "\n"))
		searched := false
		for _, step := range plan {
			switch {
			case strings.HasPrefix(step, "SCAN leases"):
				t.Errorf("%s scans the whole leases table:\n%s", q.name, strings.Join(plan, "\n"))
			case strings.HasPrefix(step, "SEARCH leases") && !strings.Contains(step, "status=?"):
				// An index that does not narrow by status reads the
				// history of ended leases too.
				t.Errorf("%s reads leases without narrowing by status: %s", q.name, step)
			case strings.HasPrefix(step, "SEARCH leases"):
				searched = true
			}
		}
		if !searched {
			t.Errorf("%s uses no index on leases:\n%s", q.name, strings.Join(plan, "\n"))
		}
	}
}
