package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
		h := &hostDB{db: raw, postgres: true}
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
	h := &hostDB{db: raw}
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
