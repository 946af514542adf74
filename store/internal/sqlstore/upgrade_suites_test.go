package sqlstore

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/storetest"
)

// Issue 25: the schema an old database migrates to behaves as a new one:
// every package's suite passes on a copy of each upgrade fixture, migrated
// and then emptied of its rows (the suites start from empty stores), so
// that an index, constraint or default that a migration gets wrong on an
// existing table fails here even when a fresh database has it right. The
// fixture is migrated and emptied once per dialect; each test of the
// suites gets its own copy of the result.
func TestUpgradedSchemaPassesTheSuites(t *testing.T) {
	t.Parallel()
	lite, err := os.ReadFile("testdata/upgrade/berth.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		var (
			once     sync.Once
			upgraded []byte // the fixture, migrated and emptied
		)
		storetest.RunStoreTests(t, func(t *testing.T) store.Stores {
			once.Do(func() {
				path := filepath.Join(t.TempDir(), "upgraded.db")
				if err := os.WriteFile(path, lite, 0o600); err != nil {
					t.Fatal(err)
				}
				db, err := Open(context.Background(), "sqlite://"+path, TestOptions)
				if err != nil {
					t.Fatalf("Open of the fixture: %v", err)
				}
				emptied(t, db)
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
					t.Fatalf("closing left a write-ahead log of %d bytes beside the file", fi.Size())
				}
				if upgraded, err = os.ReadFile(path); err != nil {
					t.Fatal(err)
				}
			})
			if upgraded == nil {
				t.Fatal("the upgraded fixture was not prepared (see the test that prepared it)")
			}
			path := filepath.Join(t.TempDir(), "berth.db")
			if err := os.WriteFile(path, upgraded, 0o600); err != nil {
				t.Fatal(err)
			}
			return openTest(t, "sqlite://"+path).Stores()
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		testenv.Postgres(t) // a missing PostgreSQL skips (or fails) once
		storetest.RunStoreTests(t, func(t *testing.T) store.Stores {
			url := testenv.PostgresFrom(t, "upgraded", func(t testing.TB, url string) {
				loadDump(t, url, "testdata/upgrade/berth.pgdump.sql")
				db, err := Open(context.Background(), url, TestOptions)
				if err != nil {
					t.Fatalf("Open of the fixture: %v", err)
				}
				emptied(t, db)
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			})
			return openTest(t, url).Stores()
		})
	})
}

// emptied deletes every row of db but its schema_migrations and returns
// db.
func emptied(t testing.TB, db *DB) *DB {
	t.Helper()
	ctx := context.Background()
	q := "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
	if db.d == postgres {
		q = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
	}
	rows, err := db.w.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != "schema_migrations" {
			tables = append(tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if len(tables) < 13 {
		t.Fatalf("the upgraded database has tables %v; want every component's", tables)
	}
	for _, name := range tables {
		if _, err := db.w.ExecContext(ctx, "DELETE FROM "+name); err != nil {
			t.Fatalf("empty %s: %v", name, err)
		}
	}
	return db
}
