package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

// Issue 11 item 7: sweeps, usage reads and pruning read the leases they
// need through indexes, never by scanning the whole history. SQLite's
// query plans say so deterministically: each query reads the leases table
// through one index only, for live leases the partial index leases_live,
// for pruning the partial index of ended leases (issue 29).
func TestLeaseQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db := openTest(t, sqliteURL(t))
	ctx := context.Background()
	// Some history, so that the plans are those of a used table.
	for i, st := range []lease.Status{lease.StatusReleased, lease.StatusExpired, lease.StatusFailed, lease.StatusActive} {
		l := leasetest.Sample(string(rune('a'+i)), st, "", "")
		l.ReleasedAt = time.Now()
		if _, err := db.InsertLease(ctx, l, lease.Quotas{}); err != nil {
			t.Fatal(err)
		}
	}
	now := nanos(time.Now())
	usage, usageArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Live: true}, listAll, 0)
	live, liveArgs := db.listLeasesSQL(lease.Filter{Live: true}, listAll, 0)
	pooled, pooledArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Company: authz.InstanceCompany, Statuses: []lease.Status{lease.StatusPooled, lease.StatusStarting}}, listAll, 0)
	byID, byIDArgs := db.listLeasesSQL(lease.Filter{ProviderLeaseID: "sbx-1"}, listAll, 0)
	history, historyArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1"}, listAll, 0)
	page, pageArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Newest: true, Limit: 50}, listTimed, 50)
	oldest, oldestArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Limit: 50}, listTimed, 50)
	untimed, untimedArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Newest: true, Limit: 50}, listNull, 50)
	queries := []struct {
		name  string
		q     string
		args  []any
		index string // the one index the plan must read leases through
	}{
		{"sweep candidates", db.sweepPickSQL(100), []any{now, now, now, "", now}, "leases_live"},
		{"environment usage", usage, usageArgs, "leases_live (environment_id=?)"},
		{"live leases", live, liveArgs, "leases_live"},
		{"pool members", pooled, pooledArgs, "leases_live (environment_id=?)"},
		{"prune candidates", db.prunePickSQL(100), []any{now, "", now}, "leases_ended (released_at>? AND released_at<?)"},
		{"by provider id", byID, byIDArgs, "leases_provider_id (provider_lease_id=?)"},
		{"environment history", history, historyArgs, "leases_environment_acquired (environment_id=?)"},
		// A page of an environment's history reads as many index entries
		// as it holds (issue 55): in the index's order, no sort.
		{"environment history page, newest", page, pageArgs, "leases_environment_acquired (environment_id=? AND acquired_at>?)"},
		{"environment history page, oldest", oldest, oldestArgs, "leases_environment_acquired (environment_id=? AND acquired_at>?)"},
		{"environment history page, no acquisition time", untimed, untimedArgs, "leases_environment_acquired (environment_id=? AND acquired_at=?)"},
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
		read := false
		for _, step := range plan {
			if !strings.HasPrefix(step, "SCAN leases") && !strings.HasPrefix(step, "SEARCH leases") {
				continue
			}
			if !strings.Contains(step, "USING INDEX "+q.index) {
				t.Errorf("%s reads leases other than through %s: %s", q.name, q.index, step)
			}
			read = true
		}
		if !read {
			t.Errorf("%s reads no leases:\n%s", q.name, strings.Join(plan, "\n"))
		}
		if strings.HasPrefix(q.name, "environment history page") && strings.Contains(strings.Join(plan, "\n"), "TEMP B-TREE") {
			t.Errorf("%s sorts what it read instead of reading the index in order:\n%s", q.name, strings.Join(plan, "\n"))
		}
	}
}

// The partial indexes' predicates are the queries' terms verbatim: a
// planner uses a partial index only for a query that carries its
// predicate, so a change to liveSQL or endedSQL without a migration that
// rebuilds the index would silently make every live read a full scan.
func TestLeasePartialIndexPredicates(t *testing.T) {
	t.Parallel()
	want := map[string]string{"leases_live": liveSQL, "leases_ended": endedSQL, "leases_provider_id": providerIDSQL}
	found := map[string]bool{}
	for _, m := range (components{}).Lease().Migrations {
		for _, stmt := range m.SQL {
			for name, pred := range want {
				if strings.HasPrefix(stmt, "CREATE INDEX "+name+" ") {
					found[name] = true
					if !strings.HasSuffix(stmt, " WHERE "+pred) {
						t.Errorf("migration %d creates %s with another predicate than the queries' %q:\n%s", m.Version, name, pred, stmt)
					}
				}
			}
		}
	}
	for name := range want {
		if !found[name] {
			t.Errorf("no migration creates %s", name)
		}
	}
}

// PostgreSQL's planner chooses by statistics: with a history of ended
// leases and a few live ones, analyzed, the live reads go through
// leases_live and pruning through leases_ended, never a scan of the table.
func TestLeaseQueriesUseIndexesPostgres(t *testing.T) {
	t.Parallel()
	db := openTest(t, testenv.Postgres(t))
	ctx := context.Background()
	for i := range 3000 {
		st := lease.StatusReleased
		if i%100 == 0 {
			st = lease.StatusActive
		}
		l := leasetest.Sample(fmt.Sprint("l", i), st, "", "")
		l.Environment, l.ProviderLeaseID, l.ReleasedAt = "env-1", fmt.Sprint("sbx-", i), time.Now()
		l.AcquiredAt = l.AcquiredAt.Add(time.Duration(i) * time.Second)
		if _, err := db.InsertLease(ctx, l, lease.Quotas{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.writes().exec(ctx, "ANALYZE leases"); err != nil {
		t.Fatal(err)
	}
	now := nanos(time.Now())
	usage, usageArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Live: true}, listAll, 0)
	byID, byIDArgs := db.listLeasesSQL(lease.Filter{ProviderLeaseID: "sbx-7"}, listAll, 0)
	page, pageArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Newest: true, Limit: 50}, listTimed, 50)
	oldest, oldestArgs := db.listLeasesSQL(lease.Filter{Environment: "env-1", Limit: 50}, listTimed, 50)
	for _, q := range []struct {
		name, q, index string
		args           []any
	}{
		{"environment usage", usage, "leases_live", usageArgs},
		{"sweep candidates", db.sweepPickSQL(100), "leases_live", []any{now, now, now, "", now}},
		{"prune candidates", db.prunePickSQL(100), "leases_ended", []any{now, "", now}},
		{"by provider id", byID, "leases_provider_id", byIDArgs},
		{"environment history page, newest", page, "leases_environment_acquired", pageArgs},
		{"environment history page, oldest", oldest, "leases_environment_acquired", oldestArgs},
	} {
		rows, err := db.reads().query(ctx, "EXPLAIN "+q.q, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var plan []string
		for rows.Next() {
			var step string
			if err := rows.Scan(&step); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, step)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		if strings.Contains(text, "Seq Scan on leases") || !strings.Contains(text, " "+q.index+" ") {
			t.Errorf("%s does not read leases through %s only:\n%s", q.name, q.index, text)
		}
		// A page reads the index in order (ties of acquired_at sorted by
		// id in groups: an incremental sort), never the whole history
		// sorted (issue 55).
		for _, step := range plan {
			if strings.HasPrefix(q.name, "environment history page") && strings.HasPrefix(strings.TrimLeft(step, " ->"), "Sort  (") {
				t.Errorf("%s sorts the environment's history:\n%s", q.name, text)
			}
		}
	}
}
