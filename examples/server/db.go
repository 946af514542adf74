package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/postgres"
	"github.com/berthdev/berth/store/sqlite"
)

// hostDB is the server's own tables (users, sessions, one-time login links,
// idempotency records, the maintenance timers' claims) in the same database as berth's stores, behind the
// server's own migrations (hostMigrations), so that replicas on one
// PostgreSQL share them.
type hostDB struct {
	db       *sql.DB
	postgres bool
	// tokens are the -tokens file's credentials a session's source is
	// checked against (nil: none; newServer sets them).
	tokens *tokenSource
	// idle ends a session unused this long (0: defaultSessionIdle).
	idle time.Duration
	// runsSlot (one slot, newHostDB) serializes this process's inserts of
	// runs (insertRun) before each takes a connection: concurrent starts
	// wait here, not each in PostgreSQL's runsLock holding a connection of
	// the pool (under load, hundreds of them), so the lock is contended
	// only across replicas.
	runsSlot chan struct{}
}

// newHostDB returns the host tables on db.
func newHostDB(db *sql.DB, postgres bool) *hostDB {
	return &hostDB{db: db, postgres: postgres, runsSlot: make(chan struct{}, 1)}
}

// openStores opens berth's store named by dsn (a postgres:// URL, or else
// a SQLite file path) and the server's own connection to the same
// database, migrated.
func openStores(ctx context.Context, dsn string) (store.Stores, *hostDB, func() error, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		pg, err := postgres.Open(ctx, dsn)
		if err != nil {
			return store.Stores{}, nil, nil, err
		}
		raw, err := sql.Open("pgx", dsn)
		if err != nil {
			pg.Close()
			return store.Stores{}, nil, nil, fmt.Errorf("server: open the host tables: %w", err)
		}
		h := newHostDB(raw, true)
		if err := h.migrate(ctx); err != nil {
			raw.Close()
			pg.Close()
			return store.Stores{}, nil, nil, err
		}
		return pg.Stores(), h, func() error { return errors.Join(raw.Close(), pg.Close()) }, nil
	}
	path := strings.TrimPrefix(dsn, "sqlite://")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return store.Stores{}, nil, nil, fmt.Errorf("server: data directory: %w", err)
	}
	lite, err := sqlite.Open(ctx, path)
	if err != nil {
		return store.Stores{}, nil, nil, err
	}
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		lite.Close()
		return store.Stores{}, nil, nil, fmt.Errorf("server: open the host tables: %w", err)
	}
	raw.SetMaxOpenConns(4)
	h := newHostDB(raw, false)
	if err := h.migrate(ctx); err != nil {
		raw.Close()
		lite.Close()
		return store.Stores{}, nil, nil, err
	}
	return lite.Stores(), h, func() error { return errors.Join(raw.Close(), lite.Close()) }, nil
}

// hostMigrations are the server's schema versions, applied in order, once
// each, recorded in server_migrations. Append only.
var hostMigrations = []string{
	// 1: users, sessions, one-time login links.
	`CREATE TABLE server_users (
		id TEXT PRIMARY KEY,
		role TEXT NOT NULL,
		companies TEXT NOT NULL,
		created_at BIGINT NOT NULL
	);
	CREATE TABLE server_sessions (
		token_hash TEXT PRIMARY KEY,
		user_id TEXT NOT NULL,
		role TEXT NOT NULL,
		companies TEXT NOT NULL,
		csrf TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		revoked INTEGER NOT NULL DEFAULT 0
	);
	CREATE TABLE server_login_links (
		token_hash TEXT PRIMARY KEY,
		user_id TEXT NOT NULL,
		expires_at BIGINT NOT NULL,
		used_at BIGINT NOT NULL DEFAULT 0
	)`,
	// 2: idempotency records of creates and runs.
	`CREATE TABLE server_idempotency (
		principal TEXT NOT NULL,
		idem_key TEXT NOT NULL,
		request TEXT NOT NULL,
		status INTEGER NOT NULL,
		headers TEXT NOT NULL DEFAULT '',
		body TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		PRIMARY KEY (principal, idem_key)
	)`,
	// 3: a session follows the credential that made it (source: the
	// credential's identity), ends when idle (last_seen) and has an id the
	// administrator lists and revokes it by; the idempotency records are
	// keyed by the credential's identity (principal) and keep the grant
	// they were made for (grantee); the maintenance timers' claims (one
	// replica at a time). Sessions of before (no source) are refused.
	`ALTER TABLE server_sessions ADD COLUMN id TEXT NOT NULL DEFAULT '';
	ALTER TABLE server_sessions ADD COLUMN source TEXT NOT NULL DEFAULT '';
	ALTER TABLE server_sessions ADD COLUMN last_seen BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE server_idempotency ADD COLUMN grantee TEXT NOT NULL DEFAULT '';
	CREATE TABLE server_timers (
		name TEXT PRIMARY KEY,
		holder TEXT NOT NULL,
		expires_at BIGINT NOT NULL
	)`,
	// 4: runs, readable from every replica; the replica running a run
	// holds it (holder, holder_until: renewed on a heartbeat), and any
	// replica's maintenance takes over a run whose claim lapsed.
	`CREATE TABLE server_runs (
		id TEXT PRIMARY KEY,
		company TEXT NOT NULL,
		owner TEXT NOT NULL,
		owner_key TEXT NOT NULL,
		status TEXT NOT NULL,
		lease_id TEXT NOT NULL DEFAULT '',
		task_id TEXT NOT NULL,
		argv TEXT NOT NULL,
		deadline BIGINT NOT NULL,
		created_at BIGINT NOT NULL,
		ended_at BIGINT NOT NULL DEFAULT 0,
		holder TEXT NOT NULL DEFAULT '',
		holder_until BIGINT NOT NULL DEFAULT 0,
		stop_requested INTEGER NOT NULL DEFAULT 0,
		view TEXT NOT NULL
	);
	CREATE INDEX server_runs_company ON server_runs (company, created_at);
	CREATE INDEX server_runs_live ON server_runs (ended_at, holder_until)`,
}

// q rewrites ? placeholders as $N for PostgreSQL.
func (h *hostDB) q(query string) string {
	if !h.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// migrate applies the pending host migrations in one transaction (under
// an advisory lock on PostgreSQL; SQLite's immediate transaction locks
// the file), so that replicas starting at once are safe.
func (h *hostDB) migrate(ctx context.Context) error {
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("server: migrate the host tables: %w", err)
	}
	defer tx.Rollback()
	if h.postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7468235)`); err != nil {
			return fmt.Errorf("server: migrate the host tables: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS server_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("server: migrate the host tables: %w", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM server_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("server: migrate the host tables: %w", err)
	}
	if have > len(hostMigrations) {
		return fmt.Errorf("server: the host tables are at version %d, newer than this server's %d", have, len(hostMigrations))
	}
	for v := have + 1; v <= len(hostMigrations); v++ {
		for _, stmt := range strings.Split(hostMigrations[v-1], ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("server: host migration %d: %w", v, err)
			}
		}
		if _, err := tx.ExecContext(ctx, h.q(`INSERT INTO server_migrations (version, applied_at) VALUES (?, ?)`), v, time.Now().Unix()); err != nil {
			return fmt.Errorf("server: host migration %d: %w", v, err)
		}
	}
	return tx.Commit()
}

// runsLock serializes the inserts of runs on PostgreSQL (the caps count
// every replica's runs); SQLite's immediate transaction locks the file.
const runsLock = 7468236

// insertRun records rec (a starting run) held by holder until until,
// refusing it when its company or its owner has the caps' runs in flight
// (not ended, on any replica): the count and the insert are one
// transaction, serialized across replicas.
func (h *hostDB) insertRun(ctx context.Context, rec *runRecord, holder string, until time.Time, lim limits) error {
	owner, err := json.Marshal(rec.owner)
	if err != nil {
		return err
	}
	argv, err := json.Marshal(rec.argv)
	if err != nil {
		return err
	}
	view, err := json.Marshal(rec.view)
	if err != nil {
		return err
	}
	select {
	case h.runsSlot <- struct{}{}:
		defer func() { <-h.runsSlot }()
	case <-ctx.Done():
		return fmt.Errorf("server: record the run: %w", context.Cause(ctx))
	}
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("server: record the run: %w", err)
	}
	defer tx.Rollback()
	if h.postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, runsLock); err != nil {
			return fmt.Errorf("server: record the run: lock: %w", err)
		}
	}
	company, key := rec.view.Company, rec.owner.String()
	// Both counts in one statement over the runs in flight (the
	// server_runs_live index): one round trip fewer in the lock.
	var nc, np int
	if err := tx.QueryRowContext(ctx, h.q(`SELECT COALESCE(SUM(CASE WHEN company = ? THEN 1 ELSE 0 END), 0), COALESCE(SUM(CASE WHEN owner_key = ? THEN 1 ELSE 0 END), 0)
		FROM server_runs WHERE ended_at = 0 AND (company = ? OR owner_key = ?)`), company, key, company, key).Scan(&nc, &np); err != nil {
		return fmt.Errorf("server: count the runs: %w", err)
	}
	switch {
	case nc >= lim.maxRunsPerCompany:
		return &errcode.Error{Message: fmt.Sprintf("Company %s has %d runs in flight, its limit: retry once one has ended.", company, nc),
			Err: fmt.Errorf("%w: company %q has %d runs in flight (-max-runs-per-company %d); retry once one ended", errTooManyRuns, company, nc, lim.maxRunsPerCompany)}
	case np >= lim.maxRunsPerPrincipal:
		return &errcode.Error{Message: fmt.Sprintf("You have %d runs in flight, your limit: retry once one has ended.", np),
			Err: fmt.Errorf("%w: %s has %d runs in flight (-max-runs-per-principal %d); retry once one ended", errTooManyRuns, rec.owner, np, lim.maxRunsPerPrincipal)}
	}
	if _, err := tx.ExecContext(ctx, h.q(`INSERT INTO server_runs (id, company, owner, owner_key, status, lease_id, task_id, argv, deadline, created_at, holder, holder_until, view)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		rec.view.ID, company, string(owner), key, rec.view.Status, rec.view.Lease, rec.view.Task, string(argv),
		rec.view.Deadline.UnixMilli(), rec.view.CreatedAt.UnixMilli(), holder, until.UnixMilli(), string(view)); err != nil {
		return fmt.Errorf("server: record the run: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("server: record the run: %w", err)
	}
	return nil
}

// deleteRun removes a run whose lease was refused (it never was).
func (h *hostDB) deleteRun(ctx context.Context, id string) {
	_, _ = h.db.ExecContext(ctx, h.q(`DELETE FROM server_runs WHERE id = ?`), id)
}

// updateRun writes v (status, lease, task, the view, the end) while
// holder holds the run; false when another replica took it over.
func (h *hostDB) updateRun(ctx context.Context, v runView, holder string) (bool, error) {
	view, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	ended := int64(0)
	if v.EndedAt != nil {
		ended = v.EndedAt.UnixMilli()
	}
	res, err := h.db.ExecContext(ctx, h.q(`UPDATE server_runs SET status = ?, lease_id = ?, task_id = ?, view = ?, ended_at = ? WHERE id = ? AND holder = ?`),
		v.Status, v.Lease, v.Task, string(view), ended, v.ID, holder)
	if err != nil {
		return false, fmt.Errorf("server: record run %s: %w", v.ID, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// renewRuns extends holder's claims on the runs it holds that have not
// ended.
func (h *hostDB) renewRuns(ctx context.Context, holder string, until time.Time) error {
	_, err := h.db.ExecContext(ctx, h.q(`UPDATE server_runs SET holder_until = ? WHERE holder = ? AND ended_at = 0`), until.UnixMilli(), holder)
	return err
}

// heldRuns returns the runs holder holds that have not ended.
func (h *hostDB) heldRuns(ctx context.Context, holder string) (map[string]bool, error) {
	rows, err := h.db.QueryContext(ctx, h.q(`SELECT id FROM server_runs WHERE holder = ? AND ended_at = 0`), holder)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		held[id] = true
	}
	return held, rows.Err()
}

// dropRunClaim lets the claim of holder on run id lapse at once.
func (h *hostDB) dropRunClaim(ctx context.Context, id, holder string) {
	_, _ = h.db.ExecContext(ctx, h.q(`UPDATE server_runs SET holder_until = 0 WHERE id = ? AND holder = ?`), id, holder)
}

// lapsedRuns lists the runs not ended whose holder's claim lapsed.
func (h *hostDB) lapsedRuns(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := h.db.QueryContext(ctx, h.q(`SELECT id FROM server_runs WHERE ended_at = 0 AND holder_until < ? ORDER BY created_at LIMIT 100`), now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("server: list the runs to take over: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// takeRun claims run id for holder until until if its claim lapsed (one
// statement: of replicas racing for it, one wins).
func (h *hostDB) takeRun(ctx context.Context, id, holder string, now, until time.Time) (bool, error) {
	res, err := h.db.ExecContext(ctx, h.q(`UPDATE server_runs SET holder = ?, holder_until = ?, stop_requested = 0 WHERE id = ? AND ended_at = 0 AND holder_until < ?`),
		holder, until.UnixMilli(), id, now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("server: take run %s over: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// requestRunStop records a stop request for the replica holding run id.
func (h *hostDB) requestRunStop(ctx context.Context, id string) error {
	_, err := h.db.ExecContext(ctx, h.q(`UPDATE server_runs SET stop_requested = 1 WHERE id = ? AND ended_at = 0`), id)
	return err
}

// stopRequested lists the runs holder holds whose stop was requested on
// another replica.
func (h *hostDB) stopRequested(ctx context.Context, holder string) ([]string, error) {
	rows, err := h.db.QueryContext(ctx, h.q(`SELECT id FROM server_runs WHERE holder = ? AND stop_requested = 1 AND ended_at = 0`), holder)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

const runColumns = `owner, argv, holder, holder_until, view`

func scanRun(sc interface{ Scan(...any) error }) (*runRecord, error) {
	var owner, argv, view string
	var until int64
	rec := &runRecord{}
	if err := sc.Scan(&owner, &argv, &rec.holder, &until, &view); err != nil {
		return nil, err
	}
	if err := errors.Join(json.Unmarshal([]byte(owner), &rec.owner), json.Unmarshal([]byte(argv), &rec.argv), json.Unmarshal([]byte(view), &rec.view)); err != nil {
		return nil, fmt.Errorf("server: a run's row: %w", err)
	}
	rec.holderUntil = time.UnixMilli(until)
	return rec, nil
}

// readRun reads run id (errRunNotFound when there is none).
func (h *hostDB) readRun(ctx context.Context, id string) (*runRecord, error) {
	rec, err := scanRun(h.db.QueryRowContext(ctx, h.q(`SELECT `+runColumns+` FROM server_runs WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %s: %w", id, errRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("server: read run %s: %w", id, err)
	}
	return rec, nil
}

// listRuns reads company's runs, newest first (at most 500): of a status,
// "live" (not ended), "ended", or "" (all).
func (h *hostDB) listRuns(ctx context.Context, company, state string) ([]*runRecord, error) {
	q, args := `SELECT `+runColumns+` FROM server_runs WHERE company = ?`, []any{company}
	switch state {
	case "":
	case "live":
		q += ` AND ended_at = 0`
	case "ended":
		q += ` AND ended_at <> 0`
	default:
		q += ` AND status = ?`
		args = append(args, state)
	}
	rows, err := h.db.QueryContext(ctx, h.q(q+` ORDER BY created_at DESC LIMIT 500`), args...)
	if err != nil {
		return nil, fmt.Errorf("server: list runs: %w", err)
	}
	defer rows.Close()
	var out []*runRecord
	for rows.Next() {
		rec, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// pruneRuns removes the runs that ended before cut.
func (h *hostDB) pruneRuns(ctx context.Context, cut time.Time) (int, error) {
	res, err := h.db.ExecContext(ctx, h.q(`DELETE FROM server_runs WHERE ended_at <> 0 AND ended_at < ?`), cut.UnixMilli())
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
