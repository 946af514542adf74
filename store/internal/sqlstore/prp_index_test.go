package sqlstore

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Issue 55: the controller's upkeep of its connected sessions is one read
// of the journal per Poll (SessionsWithCommandsAfter) and one write of
// the connections' claims per batch (RenewConnections), each a probe of a
// primary key per session, never a scan of the journal or the sessions.
// SQLite's query plans say so deterministically.
func TestRunnerUpkeepUsesPrimaryKeys(t *testing.T) {
	t.Parallel()
	db := openTest(t, sqliteURL(t))
	ctx := context.Background()
	now := nanos(time.Now())
	queries := []struct {
		name  string
		q     string
		args  []any
		table string // the table the plan must probe by its primary key
		key   string
	}{
		{"sessions with commands to send", db.pendingCommandsSQL(), []any{`[{"s":"s_1","n":0}]`}, "c", "(session=? AND seq>?)"},
		{"renew connection claims", db.renewConnectionsSQL(), []any{now, `[{"s":"s_1","c":"c_1"}]`, now}, "prp_sessions", "(id=?)"},
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
		probed := false
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN "+q.table) || strings.HasPrefix(step, "SCAN prp_") {
				t.Errorf("%s scans a table: %s", q.name, step)
			}
			if strings.HasPrefix(step, "SEARCH "+q.table+" ") && strings.HasSuffix(step, q.key) && strings.Contains(step, "sqlite_autoindex_") {
				probed = true
			}
		}
		if !probed {
			t.Errorf("%s does not probe %s by its primary key %s:\n%s", q.name, q.table, q.key, strings.Join(plan, "\n"))
		}
	}
}
