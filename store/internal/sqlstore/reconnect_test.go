package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
)

// Issue 11 item 4: after the server drops the store's connections, the next
// store calls (single writes, reads, transactions) succeed on new
// connections instead of failing on the dead ones.
func TestPostgresStoreSurvivesDroppedConnections(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	db := openTest(t, url)
	ctx := context.Background()
	// Several connections in the pool, all used just now (so none is
	// pinged before reuse).
	for i := range 4 {
		e := &environment.Environment{ID: fmt.Sprintf("e%d", i), Name: fmt.Sprintf("e%d", i), Driver: "ssh", Status: environment.StatusActive, Revision: 1}
		if err := db.CreateEnvironment(ctx, e, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := testenv.DropPostgresConnections(t, url); n == 0 {
		t.Fatal("no connection of the store was dropped; the test would prove nothing")
	}
	e, err := db.GetEnvironment(ctx, "e0")
	if err != nil {
		t.Fatalf("read after the connections dropped: %v", err)
	}
	testenv.DropPostgresConnections(t, url)
	e.Description, e.Revision = "after", 2
	if err := db.UpdateEnvironment(ctx, e, 1); err != nil {
		t.Fatalf("write after the connections dropped: %v", err)
	}
	testenv.DropPostgresConnections(t, url)
	if err := db.DeleteEnvironment(ctx, "e1", 1); err != nil {
		t.Fatalf("delete after the connections dropped: %v", err)
	}
}

// deadConn tells a dead connection from every other failure, on real
// PostgreSQL errors: a terminated backend is retried, a unique violation (a
// constraint error) never is.
func TestDeadConnClassifiesRealErrors(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	ctx := context.Background()
	raw, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	if _, err := raw.ExecContext(ctx, "CREATE TABLE u (k text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, "INSERT INTO u VALUES ('a')"); err != nil {
		t.Fatal(err)
	}
	_, err = raw.ExecContext(ctx, "INSERT INTO u VALUES ('a')")
	if _, unique := uniqueViolation(err); !unique || deadConn(err) {
		t.Errorf("duplicate key: uniqueViolation %v, deadConn %v (%v); want a unique violation that is not retried", unique, deadConn(err), err)
	}
	testenv.DropPostgresConnections(t, url)
	_, err = raw.ExecContext(ctx, "INSERT INTO u VALUES ('b')")
	if err == nil || !deadConn(err) {
		t.Errorf("statement on a terminated backend: deadConn(%v) = false, want true", err)
	}
	if deadConn(context.Canceled) || deadConn(sql.ErrNoRows) {
		t.Error("deadConn holds a cancellation or sql.ErrNoRows for a dead connection")
	}
}
