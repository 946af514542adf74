// Package sqlite is berth's store on SQLite (modernc.org/sqlite, pure Go,
// no cgo): one database file holds the records of every berth package.
//
//	db, err := sqlite.Open(ctx, "/var/lib/app/berth.db")
//	if err != nil { ... }
//	defer db.Close()
//	sys, err := berth.New(ctx, &berth.Options{Stores: db.Stores()})
//
// Open creates the file (0600, its directories 0700) if it is absent and
// applies every pending schema migration of every package, in order, in
// one transaction. Several processes may open one file at once: it runs in
// WAL mode with a 10 s busy timeout, migrations are serialized, and
// uniqueness and revision checks hold across processes. A program that
// imports this package and not store/postgres links no PostgreSQL driver.
package sqlite

import (
	"context"
	"strings"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/internal/sqlstore"
)

// DB is an open, migrated SQLite store. It is safe for concurrent use;
// Close it when done (after the berth.System that uses it).
type DB struct{ db *sqlstore.DB }

// Open opens the SQLite database named by dsn and migrates it. dsn is a
// file path ("/var/lib/app/berth.db", "berth.db" relative to the working
// directory), ":memory:" for a private in-memory database (lost on Close),
// or the same as a URL: "sqlite:///abs/path.db", "sqlite://rel/path.db",
// "sqlite::memory:". A path cannot hold a '?'. Open honours ctx while
// connecting and migrating.
func Open(ctx context.Context, dsn string) (*DB, error) {
	url := dsn
	switch {
	case dsn == ":memory:":
		url = "sqlite::memory:"
	case !strings.HasPrefix(dsn, "sqlite:"):
		url = "sqlite://" + dsn
	}
	db, err := sqlstore.Open(ctx, url, sqlstore.Options{})
	if err != nil {
		return nil, err
	}
	return &DB{db}, nil
}

// Stores returns the database as the store of every berth package, for
// berth.Options.Stores.
func (d *DB) Stores() store.Stores { return d.db.Stores() }

// Close closes the database's connections; it waits for running queries.
// The Stores must not be used afterwards.
func (d *DB) Close() error { return d.db.Close() }
