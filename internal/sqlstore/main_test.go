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
