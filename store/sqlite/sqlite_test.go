package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/sqlite"
	"github.com/berthdev/berth/store/storetest"
)

// open opens dsn for the test and closes it at cleanup.
func open(t *testing.T, dsn string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("Open(%q): %v", dsn, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// Every package's store passes its suite on a SQLite file and on a private
// in-memory database, through the Stores value hosts use.
func TestStores(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		storetest.RunStoreTests(t, func(t *testing.T) store.Stores {
			return open(t, filepath.Join(t.TempDir(), "berth.db")).Stores()
		})
	})
	t.Run("memory", func(t *testing.T) {
		storetest.RunStoreTests(t, func(t *testing.T) store.Stores { return open(t, ":memory:").Stores() })
	})
}

// Open takes a path, a sqlite: URL or :memory:, and nothing else.
func TestOpenNames(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, dsn := range []string{filepath.Join(dir, "a.db"), "sqlite://" + filepath.Join(dir, "b.db"), "sqlite::memory:", ":memory:"} {
		if _, err := open(t, dsn).Stores().Qualifications.ListQualifications(ctx, "env-1"); err != nil {
			t.Errorf("a read of %q: %v", dsn, err)
		}
	}
	if m := open(t, filepath.Join(dir, "a.db")).Stores().Missing(); len(m) > 0 {
		t.Errorf("Stores() leaves %v nil", m)
	}
	for _, dsn := range []string{"sqlite:relative.db", filepath.Join(dir, "c.db?mode=ro")} {
		if db, err := sqlite.Open(ctx, dsn); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded, want an error", dsn)
		}
	}
}
