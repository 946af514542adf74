package sqlstore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", as store/postgres registers it
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", as store/sqlite registers it

	"github.com/berthdev/berth/internal/testenv"
)

// TestOptions are the Options store/postgres gives Open (store/sqlite
// gives none); the tests of both dialects use them.
var TestOptions = Options{ConnectFailed: func(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}}

// TestMain stops the PostgreSQL cluster that testenv.Postgres starts.
func TestMain(m *testing.M) { testenv.PostgresMain(m) }

// openTest opens url for the test and closes it at cleanup.
func openTest(t testing.TB, url string) *DB {
	t.Helper()
	db, err := Open(context.Background(), url, TestOptions)
	if err != nil {
		t.Fatalf("Open(%q): %v", url, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// sqliteURL returns the URL of a new SQLite file in the test's directory.
func sqliteURL(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "berth.db")
}

// database is one database the store runs on; url returns the URL of a
// fresh, empty database for a test.
type database struct {
	name string
	url  func(t *testing.T) string
	// shared: a second pool can open the same URL (not private in-memory
	// SQLite).
	shared bool
}

var databases = []database{
	{name: "sqlite", url: func(t *testing.T) string { return sqliteURL(t) }, shared: true},
	{name: "sqlite-memory", url: func(*testing.T) string { return "sqlite::memory:" }},
	{name: "postgres", url: func(t *testing.T) string { return testenv.Postgres(t) }, shared: true},
}

// eachDatabase runs run as a parallel subtest per database (only those
// several pools can share, with sharedOnly). The database's url is asked
// once first, so that a missing PostgreSQL skips (or fails) once, before
// the subtests.
func eachDatabase(t *testing.T, sharedOnly bool, run func(t *testing.T, url func(t *testing.T) string)) {
	for _, db := range databases {
		if sharedOnly && !db.shared {
			continue
		}
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			db.url(t)
			run(t, db.url)
		})
	}
}
