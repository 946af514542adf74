package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/testenv"
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

// The same on PostgreSQL, whose planner weighs statistics: with a
// journal of some size (ANALYZEd), the read of which sessions have
// commands to send probes the journal's primary key per session and
// never reads the whole journal.
func TestRunnerUpkeepUsesPrimaryKeysOnPostgres(t *testing.T) {
	t.Parallel()
	db := openTest(t, testenv.Postgres(t))
	ctx := context.Background()
	// 100,000 sessions, 20,000 commands of 1,000 of them. (With fewer
	// sessions, a claims' renewal may read them all: a hash join is then
	// cheaper than a probe per claim.)
	if _, err := db.writes().exec(ctx, `INSERT INTO prp_commands (session, seq, id, digest, command, state, created_at, updated_at)
		SELECT 's_' || (i / 20), i % 20 + 1, 'c_' || i, 'd', '{}', 'received', 0, 0 FROM generate_series(0, 19999) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.writes().exec(ctx, `INSERT INTO prp_sessions (id, lease, run, company, scope, created_at)
		SELECT 's_' || i, 'lease-1', 'run-1', 'co-1', 'task', 0 FROM generate_series(0, 99999) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.writes().exec(ctx, `ANALYZE prp_commands, prp_sessions`); err != nil {
		t.Fatal(err)
	}
	cursors := make([]string, 0, 500)
	for i := range 500 {
		cursors = append(cursors, fmt.Sprintf(`{"s":"s_%d","n":%d}`, i*2, i%25))
	}
	claims := make([]string, 0, 500)
	for i := range 500 {
		claims = append(claims, fmt.Sprintf(`{"s":"s_%d","c":"c_%d"}`, i*2, i))
	}
	explain := func(name, q string, args ...any) string {
		t.Helper()
		rows, err := db.reads().query(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		t.Logf("%s:\n%s", name, strings.Join(plan, "\n"))
		return strings.Join(plan, "\n")
	}
	if plan := explain("sessions with commands to send", db.pendingCommandsSQL(), "["+strings.Join(cursors, ",")+"]"); strings.Contains(plan, "Seq Scan on prp_commands") || !strings.Contains(plan, "prp_commands_pkey") {
		t.Errorf("the read of which sessions have commands to send does not probe the journal's primary key:\n%s", plan)
	}
	if plan := explain("renew connection claims", db.renewConnectionsSQL(), int64(0), "["+strings.Join(claims, ",")+"]", int64(0)); strings.Contains(plan, "Seq Scan on prp_sessions") || !strings.Contains(plan, "prp_sessions_pkey") {
		t.Errorf("the renewal of connection claims does not find the sessions by their primary key:\n%s", plan)
	}
	// And it answers: sessions s_0, s_2, ... past n of their 20 commands.
	got, err := db.PRP().SessionsWithCommandsAfter(ctx, []controller.CommandCursor{{Session: "s_0", Sent: 19}, {Session: "s_2", Sent: 20}, {Session: "s_4", Sent: 0}})
	if err != nil || len(got) != 2 {
		t.Errorf("SessionsWithCommandsAfter = %v, %v; want s_0 and s_4", got, err)
	}
}

// BenchmarkRunnerUpkeep measures the controller's upkeep of 10,000
// connected sessions (issue 55): the journal poller's one read of which
// have commands to send (per Poll, 500 ms by default), and one batched
// renewal of all their claims (per heartbeat, spread over batches).
//
//	go test -run '^$' -bench RunnerUpkeep ./store/internal/sqlstore/
func BenchmarkRunnerUpkeep(b *testing.B) {
	const n = 10_000
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.Postgres}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			db := openTest(b, tc.url(b))
			s := db.PRP()
			cursors := make([]controller.CommandCursor, n)
			claims := make([]controller.ConnectionClaim, n)
			now := time.Now()
			for i := range n {
				id := fmt.Sprintf("s_%05d", i)
				if err := s.CreateSession(ctx, controller.Session{ID: id, Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: "task", CreatedAt: now}); err != nil {
					b.Fatal(err)
				}
				cursors[i] = controller.CommandCursor{Session: id}
				claims[i] = controller.ConnectionClaim{Session: id, Conn: "c_" + id}
			}
			b.Run("commands-to-send", func(b *testing.B) {
				for b.Loop() {
					if ids, err := s.SessionsWithCommandsAfter(ctx, cursors); err != nil || len(ids) != 0 {
						b.Fatal(ids, err)
					}
				}
			})
			b.Run("renew-claims", func(b *testing.B) {
				for b.Loop() {
					now := time.Now()
					if held, err := s.RenewConnections(ctx, claims, now.Add(time.Minute), now); err != nil || len(held) != n {
						b.Fatal(len(held), err)
					}
				}
			})
		})
	}
}
