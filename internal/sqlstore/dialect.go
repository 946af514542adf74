package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
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

// uniqueViolation reports whether err is a unique or primary-key violation
// and names what was violated: the constraint or index name on PostgreSQL,
// "table.column" on SQLite. Callers match it with strings.Contains against
// their own column or index names.
func uniqueViolation(err error) (what string, ok bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return pe.ConstraintName, true
	}
	var se *msqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
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
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// handle runs queries written with ? placeholders on a pool or inside a
// transaction, rebinding them for the dialect.
type handle struct {
	q querier
	d dialect
}

func (h handle) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return h.q.ExecContext(ctx, h.d.rebind(query), args...)
}

func (h handle) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return h.q.QueryContext(ctx, h.d.rebind(query), args...)
}

func (h handle) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return h.q.QueryRowContext(ctx, h.d.rebind(query), args...)
}

// reads returns the handle for reads outside a transaction. A read that
// decides a write must happen inside inTx instead.
func (db *DB) reads() handle { return handle{q: db.r, d: db.d} }

// writes returns the handle for single-statement writes outside a
// transaction.
func (db *DB) writes() handle { return handle{q: db.w, d: db.d} }

// maxTxAttempts bounds how often inTx runs fn when PostgreSQL reports a
// serialization failure or deadlock.
const maxTxAttempts = 5

// inTx runs fn in a transaction and commits it if fn returns nil; any error
// rolls it back. On SQLite the transaction holds the write lock from its
// start (BEGIN IMMEDIATE); on PostgreSQL it runs at READ COMMITTED, so lock
// the rows you will change (SELECT ... FOR UPDATE there). fn may be run
// again after a serialization failure or deadlock, so it must not have
// effects outside tx. Inside fn use only tx: on SQLite the writer pool has a
// single connection, and a query on db from inside fn would wait forever.
func (db *DB) inTx(ctx context.Context, fn func(tx handle) error) error {
	var err error
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		err = db.runTx(ctx, fn)
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
