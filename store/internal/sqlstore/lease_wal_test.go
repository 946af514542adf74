package sqlstore_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/berthdev/berth/store/internal/sqlstore"
)

// A lease cycle (acquire, release) on SQLite writes a bounded number of
// pages to the WAL (issue 29): each page a statement changes is one frame,
// so an index that a state change rewrites (one keyed or filtered by the
// status, say) shows here as two more frames per cycle, and a cycle's cost
// follows its frames. Measured: about 15 (25 before migration 8 of the
// lease component). The count is the WAL's size after a truncating
// checkpoint and a few cycles, fewer than the thousand frames after which
// SQLite checkpoints on its own.
func TestLeaseCycleWALFrames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := dir + "/berth.db"
	db, err := sqlstore.Open(context.Background(), "sqlite://"+path, sqlstore.TestOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cycle := acquireReleaseCycle(t, db)
	for i := range 300 { // history, so that the b-trees have depth
		cycle(i)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	var pageSize int64
	if err := raw.QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	var busy, logged, done int
	if err := raw.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &done); err != nil || busy != 0 {
		t.Fatalf("checkpoint: busy %d, %v", busy, err)
	}
	const cycles, maxFrames = 40, 17
	for i := range cycles {
		cycle(1000 + i)
	}
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	const header = 32 // the WAL's; each frame is a 24-byte header and a page
	perCycle := float64(st.Size()-header) / float64(24+pageSize) / cycles
	t.Logf("%.1f WAL frames per lease cycle", perCycle)
	if perCycle > maxFrames {
		t.Errorf("a lease cycle writes %.1f pages to the WAL, more than %d: does a state change rewrite an index?", perCycle, maxFrames)
	}
}
