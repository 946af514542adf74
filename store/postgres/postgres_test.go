package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/postgres"
	"github.com/berthdev/berth/store/storetest"
)

// TestMain stops the PostgreSQL cluster that testenv.Postgres starts.
func TestMain(m *testing.M) { testenv.PostgresMain(m) }

// Every package's store passes its suite on PostgreSQL, through the Stores
// value hosts use. Each test opens a fresh copy of a database that Open
// migrated once (Open on an empty database, the migrations themselves,
// are tested here by TestOpenMigratesAnEmptyDatabase and in
// store/internal/sqlstore).
func TestStores(t *testing.T) {
	testenv.Postgres(t) // a missing PostgreSQL skips (or fails) once
	storetest.RunStoreTests(t, func(t *testing.T) store.Stores {
		db, err := postgres.Open(context.Background(), testenv.PostgresFrom(t, "migrated", migrated))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db.Stores()
	})
}

// migrated prepares the template of TestStores: an empty database that Open
// migrated.
func migrated(t testing.TB, url string) {
	db, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open of an empty database: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// Open migrates an empty database to a store that every Stores field
// serves.
func TestOpenMigratesAnEmptyDatabase(t *testing.T) {
	db, err := postgres.Open(context.Background(), testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if m := db.Stores().Missing(); len(m) > 0 {
		t.Errorf("Stores() leaves %v nil", m)
	}
}

// Open refuses what is not a PostgreSQL URL, and never echoes a password.
func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	if _, err := postgres.Open(ctx, "sqlite:///tmp/x.db"); err == nil {
		t.Error("Open of a sqlite URL succeeded")
	}
	_, err := postgres.Open(ctx, "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=1")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open of an unreachable server = %v; want an error without the password", err)
	}
}
