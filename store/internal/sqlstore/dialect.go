package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strconv"
	"strings"
	"time"
)

// dialect is the small layer between the one SQL code path and the two
// databases. Queries are written once, with ? placeholders, in the SQL that
// SQLite and PostgreSQL share; the dialect rewrites placeholders and supplies
// the few clauses that differ.
type dialect int

const (
	sqlite dialect = iota
	postgres
)

// String returns "sqlite" or "postgres".
func (d dialect) String() string {
	if d == postgres {
		return "postgres"
	}
	return "sqlite"
}

// rebind rewrites ? placeholders to $1, $2, ... for PostgreSQL. Queries must
// not contain a literal '?' (none of ours do: no string literals with one,
// no jsonb ? operator).
func (d dialect) rebind(q string) string {
	if d != postgres || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// collateC is the collation suffix that makes ORDER BY compare bytes, as Go
// does: ` COLLATE "C"` on PostgreSQL (whose default follows the database
// locale); "" on SQLite (BINARY by default).
func (d dialect) collateC() string {
	if d == postgres {
		return ` COLLATE "C"`
	}
	return ""
}

// indexedBy is the clause after a table name that makes SQLite read it
// through the named index (an error if it cannot): " INDEXED BY name"; ""
// on PostgreSQL, whose planner weighs a partial index by the statistics
// autovacuum keeps. SQLite has none unless ANALYZE ran, and without them
// it prefers an index that yields the ORDER BY to a partial one, even when
// the first reads the whole history and the second the live leases only.
func (d dialect) indexedBy(name string) string {
	if d == postgres {
		return ""
	}
	return " INDEXED BY " + name
}

// forUpdate is the row-locking suffix of a SELECT inside a transaction:
// " FOR UPDATE" on PostgreSQL; "" on SQLite, whose transactions (BEGIN
// IMMEDIATE) already hold the database's write lock.
//
//lint:ignore U1000 the helper doc.go gives components that lock rows in inTx; today's components use conditional UPDATEs instead.
func (d dialect) forUpdate() string {
	if d == postgres {
		return " FOR UPDATE"
	}
	return ""
}

// The core names no database driver: store/sqlite and store/postgres
// register theirs (modernc.org/sqlite, pgx), so that a host linking one
// dialect links only its driver. Driver errors are told apart by the
// methods they have, not by their types.

// sqlState is what PostgreSQL errors of pgx (*pgconn.PgError) have: the
// SQLSTATE code.
type sqlState interface {
	error
	SQLState() string
}

// sqliteCoder is what SQLite errors of modernc.org/sqlite (*sqlite.Error)
// have: the extended result code.
type sqliteCoder interface {
	error
	Code() int
}

// SQLite's extended result codes of a unique and a primary-key violation
// (modernc.org/sqlite/lib.SQLITE_CONSTRAINT_UNIQUE, _PRIMARYKEY).
const (
	sqliteConstraintUnique     = 2067
	sqliteConstraintPrimaryKey = 1555
)

// pgCode returns the SQLSTATE of a PostgreSQL error in err's chain, or "".
func pgCode(err error) string {
	var pe sqlState
	if errors.As(err, &pe) {
		return pe.SQLState()
	}
	return ""
}

// uniqueViolation reports whether err is a unique or primary-key violation
// and names what was violated: PostgreSQL's message (which names the
// constraint or index), "table.column" on SQLite. Callers match it with
// strings.Contains against their own column or index names.
func uniqueViolation(err error) (what string, ok bool) {
	if pgCode(err) == "23505" {
		var pe sqlState
		errors.As(err, &pe)
		return pe.Error(), true
	}
	var se sqliteCoder
	if errors.As(err, &se) && (se.Code() == sqliteConstraintUnique || se.Code() == sqliteConstraintPrimaryKey) {
		msg := se.Error()
		if i := strings.LastIndex(msg, "failed: "); i >= 0 {
			msg = msg[i+len("failed: "):]
		}
		return msg, true
	}
	return "", false
}

// retryable reports whether a transaction that failed with err may be run
// again from the start: PostgreSQL serialization failures and deadlocks.
func retryable(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// deadConn reports whether err says that the PostgreSQL connection was dead
// before the statement ran, so running it again on another connection
// cannot apply it twice: the server terminated the backend (57P01
// admin_shutdown, as pg_terminate_backend or a restart does; 57P02
// crash_shutdown; 57P03 cannot_connect_now), pgx knows the request was
// never sent (its errors' SafeToRetry), or database/sql's
// driver.ErrBadConn. A failed connection attempt is one too, told by the
// dialect's Options.ConnectFailed (DB.deadConn). A constraint violation, a
// conflict or an I/O error after the statement was sent is never a dead
// connection.
func deadConn(err error) bool {
	if err == nil {
		return false
	}
	var safe interface{ SafeToRetry() bool }
	if errors.Is(err, driver.ErrBadConn) || errors.As(err, &safe) && safe.SafeToRetry() {
		return true
	}
	c := pgCode(err)
	return c == "57P01" || c == "57P02" || c == "57P03"
}

// deadConn is deadConn with the dialect's test for a failed connection
// attempt.
func (db *DB) deadConn(err error) bool {
	return deadConn(err) || err != nil && db.connectFailed != nil && db.connectFailed(err)
}

// maxConnAttempts bounds how often a statement outside a transaction is
// run when its connection turns out dead.
const maxConnAttempts = 4

// retryDead runs op, and again (at most maxConnAttempts times in all, with a
// short backoff that honours ctx) while it fails on a dead connection. After
// a dead connection the pool's idle connections are closed, since a server
// that dropped one has usually dropped them all.
func retryDead(ctx context.Context, pool *sql.DB, dead func(error) bool, op func() error) error {
	wait := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if !dead(err) || attempt == maxConnAttempts || ctx.Err() != nil {
			return err
		}
		dropIdle(pool)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 4
	}
}

// dropIdle closes the idle connections of pool; the ones in use are
// closed when returned if they are dead.
func dropIdle(pool *sql.DB) {
	if pool == nil {
		return
	}
	pool.SetMaxIdleConns(0)
	pool.SetMaxIdleConns(maxPostgresConns)
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// handle runs queries written with ? placeholders on a pool or inside a
// transaction, rebinding them for the dialect. On a PostgreSQL pool (pool
// set) a statement that fails on a dead connection runs again on another
// (retryDead); inside a transaction inTx retries the whole transaction.
type handle struct {
	q     querier
	d     dialect
	pool  *sql.DB          // the PostgreSQL pool q is; nil in a transaction or on SQLite
	dead  func(error) bool // DB.deadConn, with pool
	stmts *stmtCache       // the prepared statements of the SQLite pool q is; nil otherwise
}

// run runs op once, or under retryDead on a PostgreSQL pool.
func (h handle) run(ctx context.Context, op func() error) error {
	if h.pool == nil {
		return op()
	}
	return retryDead(ctx, h.pool, h.dead, op)
}

func (h handle) exec(ctx context.Context, query string, args ...any) (res sql.Result, err error) {
	if st := h.prepared(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	err = h.run(ctx, func() error {
		res, err = h.q.ExecContext(ctx, h.d.rebind(query), args...)
		return err
	})
	return res, err
}

func (h handle) query(ctx context.Context, query string, args ...any) (rows *sql.Rows, err error) {
	if st := h.prepared(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	err = h.run(ctx, func() error {
		rows, err = h.q.QueryContext(ctx, h.d.rebind(query), args...)
		return err
	})
	return rows, err
}

func (h handle) queryRow(ctx context.Context, query string, args ...any) (row *sql.Row) {
	if st := h.prepared(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	_ = h.run(ctx, func() error {
		row = h.q.QueryRowContext(ctx, h.d.rebind(query), args...)
		return row.Err() // the query's error; sql.ErrNoRows comes only from Scan
	})
	return row
}

// prepared returns the cached prepared statement of query on a SQLite
// pool (stmtCache), or nil.
func (h handle) prepared(ctx context.Context, query string) *sql.Stmt {
	if h.stmts == nil {
		return nil
	}
	return h.stmts.get(ctx, query)
}

// poolHandle returns the handle for statements outside a transaction on p.
func (db *DB) poolHandle(p *sql.DB) handle {
	h := handle{q: p, d: db.d}
	switch {
	case db.d == postgres:
		h.pool, h.dead = p, db.deadConn
	case p == db.w:
		h.stmts = db.wStmts
	case p == db.r:
		h.stmts = db.rStmts
	}
	return h
}

// reads returns the handle for reads outside a transaction. A read that
// decides a write must happen inside inTx instead.
func (db *DB) reads() handle { return db.poolHandle(db.r) }

// writes returns the handle for single-statement writes outside a
// transaction.
func (db *DB) writes() handle { return db.poolHandle(db.w) }

// maxTxAttempts bounds how often inTx runs fn when PostgreSQL reports a
// serialization failure or deadlock, or the connection was dead.
const maxTxAttempts = 5

// inTx runs fn in a transaction and commits it if fn returns nil; any error
// rolls it back. On SQLite the transaction holds the write lock from its
// start (BEGIN IMMEDIATE); on PostgreSQL it runs at READ COMMITTED, so lock
// the rows you will change (SELECT ... + db.d.forUpdate()). fn may be run
// again after a serialization failure or deadlock, or when its connection
// was dead (deadConn: the server rolled the transaction back), so it must
// not have effects outside tx. Inside fn use only tx: on SQLite the writer
// pool has a single connection, and a query on db from inside fn would wait
// forever.
func (db *DB) inTx(ctx context.Context, fn func(tx handle) error) error {
	var err error
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		err = db.runTx(ctx, fn)
		if db.d == postgres && db.deadConn(err) && ctx.Err() == nil {
			dropIdle(db.w)
			continue
		}
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (db *DB) runTx(ctx context.Context, fn func(tx handle) error) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(handle{q: tx, d: db.d}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
