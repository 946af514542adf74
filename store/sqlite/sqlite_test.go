package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
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
// in-memory database, through the Stores value hosts use. Each test of the
// file's suite opens its own copy of a file that Open migrated once (Open
// of a new file is TestOpenNames's).
func TestStores(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		var (
			once     sync.Once
			migrated []byte // a new file, opened (migrated) and closed
		)
		storetest.RunStoreTests(t, func(t *testing.T) store.Stores {
			once.Do(func() {
				path := filepath.Join(t.TempDir(), "migrated.db")
				db, err := sqlite.Open(context.Background(), path)
				if err != nil {
					t.Fatalf("Open(%q): %v", path, err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
					t.Fatalf("closing left a write-ahead log of %d bytes beside the file", fi.Size())
				}
				if migrated, err = os.ReadFile(path); err != nil {
					t.Fatal(err)
				}
			})
			if migrated == nil {
				t.Fatal("the migrated file was not prepared (see the test that prepared it)")
			}
			path := filepath.Join(t.TempDir(), "berth.db")
			if err := os.WriteFile(path, migrated, 0o600); err != nil {
				t.Fatal(err)
			}
			return open(t, path).Stores()
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
