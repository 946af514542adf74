// Package postgres is berth's store on PostgreSQL (pgx through
// database/sql): one database holds the records of every berth package,
// shared by every replica of the host.
//
//	db, err := postgres.Open(ctx, "postgres://berth@db.internal/berth")
//	if err != nil { ... }
//	defer db.Close()
//	sys, err := berth.New(ctx, &berth.Options{Stores: db.Stores()})
//
// Open applies every pending schema migration of every package, in order,
// in one transaction under an advisory lock, so replicas opening at once
// are safe. Transactions run at READ COMMITTED; a statement or transaction
// that fails on a connection the server dropped before running it (a
// restart, a failover) runs again on a new one. A program that imports
// this package and not store/sqlite links no SQLite.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/internal/sqlstore"
)

// DB is an open, migrated PostgreSQL store. It is safe for concurrent use;
// Close it when done (after the berth.System that uses it).
type DB struct{ db *sqlstore.DB }

// Open connects to the PostgreSQL database at url ("postgres://..." or
// "postgresql://...", as pgx understands it) and migrates it. Errors never
// contain the URL's password. Open honours ctx while connecting and
// migrating.
func Open(ctx context.Context, url string) (*DB, error) {
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return nil, fmt.Errorf("postgres: want a postgres:// or postgresql:// URL")
	}
	db, err := sqlstore.Open(ctx, url, sqlstore.Options{ConnectFailed: connectFailed})
	if err != nil {
		return nil, err
	}
	return &DB{db}, nil
}

// connectFailed reports a failed connection attempt of pgx.
func connectFailed(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// Stores returns the database as the store of every berth package, for
// berth.Options.Stores.
func (d *DB) Stores() store.Stores { return d.db.Stores() }

// Close closes the database's connections; it waits for running queries.
// The Stores must not be used afterwards.
func (d *DB) Close() error { return d.db.Close() }
