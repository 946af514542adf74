package sqlstore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/internal/testenv"
)

// TestMain stops the PostgreSQL cluster that testenv.Postgres starts.
func TestMain(m *testing.M) { testenv.PostgresMain(m) }

// openTest opens url for the test and closes it at cleanup.
func openTest(t testing.TB, url string) *DB {
	t.Helper()
	db, err := Open(context.Background(), url)
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
