package sqlstore

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/internal/testenv"
)

// TestWriteUpgradeFixtures writes the upgrade fixtures (makeUpgradeRows)
// into a new SQLite file and a PostgreSQL database and dumps the latter,
// into the directory named by $BERTH_WRITE_UPGRADE_FIXTURES; it skips
// without it:
//
//	BERTH_WRITE_UPGRADE_FIXTURES=$PWD/testdata/upgrade go test -run TestWriteUpgradeFixtures ./internal/sqlstore
func TestWriteUpgradeFixtures(t *testing.T) {
	dir := os.Getenv("BERTH_WRITE_UPGRADE_FIXTURES")
	if dir == "" {
		t.Skip("set BERTH_WRITE_UPGRADE_FIXTURES=DIR to write the upgrade fixtures")
	}
	ctx := context.Background()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "berth.db")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	lite, err := Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeUpgradeRows(ctx, lite, makeUpgradeRows()); err != nil {
		t.Fatal(err)
	}
	// One file: the WAL is checkpointed into the database.
	if _, err := lite.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := lite.w.ExecContext(ctx, "PRAGMA journal_mode=DELETE"); err != nil {
		t.Fatal(err)
	}
	if err := lite.Close(); err != nil {
		t.Fatal(err)
	}

	url := testenv.Postgres(t)
	pg := openTest(t, url)
	if err := writeUpgradeRows(ctx, pg, makeUpgradeRows()); err != nil {
		t.Fatal(err)
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	pgDump := "pg_dump"
	if len(bins) > 0 {
		pgDump = bins[len(bins)-1]
	}
	out, err := exec.Command(pgDump, "--inserts", "--no-owner", "--no-privileges", "--no-comments", url).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "berth.pgdump.sql"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}
