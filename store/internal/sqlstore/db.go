package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DB is an open SQL store: SQLite or PostgreSQL, schema migrated. It
// implements environment.Store (and, as components are added, the other
// packages' Store interfaces). A DB is safe for concurrent use; Close it when
// done.
type DB struct {
	d dialect
	// w runs writes and transactions. On SQLite it holds one connection,
	// so writers of this process queue in Go instead of spinning on
	// SQLITE_BUSY; other processes are waited for by busy_timeout.
	w *sql.DB
	// r runs reads outside transactions. On SQLite files it is a pool of
	// read-only connections (WAL lets them read while w writes); elsewhere
	// it is w.
	r *sql.DB
	// target names the database in errors, without any password.
	target string
	// connectFailed is Options.ConnectFailed.
	connectFailed func(error) bool
	// wStmts and rStmts are the prepared statements of w and r on SQLite
	// (the same cache when r is w); nil on PostgreSQL.
	wStmts, rStmts *stmtCache
	// leaseRows remembers the rows of live leases this process last wrote,
	// for UpdateLease to set only what changed.
	leaseRows leaseRows
}

// Options are what a dialect package gives Open besides the URL.
type Options struct {
	// ConnectFailed reports whether err is the driver's failure to make a
	// connection (pgx's *pgconn.ConnectError): the statement never reached
	// the server, so it may run again on a new connection. Nil: none.
	ConnectFailed func(err error) bool
}

// Open opens the store at rawURL and applies every pending migration of
// every component before returning (see doc.go). Accepted URLs:
//
//	sqlite:///abs/path.db     a file (created 0600 if absent, with its directories 0700)
//	sqlite://rel/path.db      a file relative to the working directory
//	sqlite::memory:           a private in-memory database
//	postgres://... or postgresql://...   as understood by pgx
//
// SQLite databases run in WAL mode with a 10 s busy timeout and foreign keys
// on. Errors never contain the URL's password. Open honours ctx while
// connecting and migrating.
//
// Open names no database driver: the database/sql drivers "sqlite"
// (modernc.org/sqlite) and "pgx" (pgx's stdlib) must be registered by the
// caller, as store/sqlite and store/postgres do.
func Open(ctx context.Context, rawURL string, opts Options) (*DB, error) {
	db, err := open(rawURL)
	if err != nil {
		return nil, err
	}
	if db.d == sqlite {
		db.wStmts, db.rStmts = newStmtCache(db.w), newStmtCache(db.r)
		if db.r == db.w {
			db.rStmts = db.wStmts
		}
	}
	db.connectFailed = opts.ConnectFailed
	if err := db.pingOpen(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// maxPostgresConns is the size of a PostgreSQL store's connection pool.
const maxPostgresConns = 16

// sqlitePragmas are applied to every SQLite connection.
const sqlitePragmas = "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"

func open(rawURL string) (*DB, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		target := redact(rawURL)
		w, err := sql.Open("pgx", rawURL)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: open %s: %w", target, err)
		}
		w.SetMaxOpenConns(maxPostgresConns)
		w.SetMaxIdleConns(maxPostgresConns)
		return &DB{d: postgres, w: w, r: w, target: target}, nil
	case strings.HasPrefix(rawURL, "sqlite:"):
		path, memory, err := sqlitePath(rawURL)
		if err != nil {
			return nil, err
		}
		if memory {
			// Every connection to ":memory:" is a new database, so the
			// store keeps exactly one, forever.
			w, err := sql.Open("sqlite", ":memory:?"+sqlitePragmas+"&_txlock=immediate")
			if err != nil {
				return nil, fmt.Errorf("sqlstore: open %s: %w", rawURL, err)
			}
			w.SetMaxOpenConns(1)
			w.SetMaxIdleConns(1)
			w.SetConnMaxLifetime(0)
			w.SetConnMaxIdleTime(0)
			return &DB{d: sqlite, w: w, r: w, target: rawURL}, nil
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("sqlstore: open %s: %w", rawURL, err)
		}
		if err := createPrivate(path); err != nil {
			return nil, fmt.Errorf("sqlstore: open %s: %w", rawURL, err)
		}
		// BEGIN IMMEDIATE takes the write lock at the start of a
		// transaction, so a transaction never fails half-way because
		// another process started writing (SQLITE_BUSY_SNAPSHOT).
		w, err := sql.Open("sqlite", path+"?"+sqlitePragmas+"&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("sqlstore: open %s: %w", rawURL, err)
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		r, err := sql.Open("sqlite", path+"?"+sqlitePragmas+"&_pragma=query_only(1)")
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("sqlstore: open %s: %w", rawURL, err)
		}
		r.SetMaxOpenConns(4)
		r.SetMaxIdleConns(4)
		return &DB{d: sqlite, w: w, r: r, target: rawURL}, nil
	}
	return nil, fmt.Errorf("sqlstore: unsupported store URL %q: want sqlite:///path, sqlite::memory: or postgres://HOST/DB", redact(rawURL))
}

// createPrivate creates the database file at path with mode 0600 if it does
// not exist yet. The mode is set with chmod after creation, so neither the
// umask nor a parent directory's default ACL widens it. SQLite gives the
// -wal and -shm files it creates beside the database the database file's
// mode, so they are 0600 too. An existing file is left as it is: its mode is
// its owner's choice.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sqlitePath returns the file path of a sqlite: URL, or memory.
func sqlitePath(rawURL string) (path string, memory bool, err error) {
	rest := strings.TrimPrefix(rawURL, "sqlite:")
	switch rest {
	case ":memory:", "//:memory:":
		return "", true, nil
	}
	if !strings.HasPrefix(rest, "//") {
		return "", false, fmt.Errorf("sqlstore: malformed SQLite URL %q: want sqlite:///abs/path.db or sqlite://rel/path.db", rawURL)
	}
	path = strings.TrimPrefix(rest, "//")
	// The path is taken literally (no %-decoding). SQLite's driver reads
	// everything after a '?' as its own options, so a path cannot hold one.
	if path == "" || strings.Contains(path, "?") {
		return "", false, fmt.Errorf("sqlstore: malformed SQLite URL %q: want a file path without '?'", rawURL)
	}
	return filepath.Clean(path), false, nil
}

// redact returns rawURL with any password (in the user info or a password
// query parameter) replaced by "xxxxx".
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Never echo a URL we could not parse: it may hold a password.
		return "(unparsable URL)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Close closes the store's connections. It waits for running queries.
func (db *DB) Close() error {
	err := db.wStmts.close()
	if db.rStmts != db.wStmts {
		err = errors.Join(err, db.rStmts.close())
	}
	err = errors.Join(err, db.w.Close())
	if db.r != db.w {
		err = errors.Join(err, db.r.Close())
	}
	return err
}

// pingOpen is the first Ping of Open. A new SQLite connection switches the
// file to WAL mode, and SQLite answers SQLITE_BUSY at once, without its busy
// handler, while another process's first connection is doing the same: so
// a busy answer is retried, with a short pause, for up to the busy_timeout,
// honouring ctx.
func (db *DB) pingOpen(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := db.Ping(ctx)
		if err == nil || db.d != sqlite || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Ping checks that the database answers, honouring ctx.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.w.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlstore: ping %s: %w", db.target, err)
	}
	return nil
}

// Dialect returns "sqlite" or "postgres".
func (db *DB) Dialect() string { return db.d.String() }
