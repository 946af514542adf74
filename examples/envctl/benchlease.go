package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/benchload"
	"github.com/berthdev/berth/internal/testenv"
)

// The lease manager's rows (internal/benchload): acquire+release cycles
// through a System on memory, SQLite and PostgreSQL against the bare fake
// driver's acquire+destroy, and host replicas on one PostgreSQL.

// leaseDur is how long each lease workload runs.
func (b *bench) leaseDur() time.Duration {
	if b.scale.execs < fullScale.execs { // --quick
		return 500 * time.Millisecond
	}
	return 3 * time.Second
}

// cycleRow runs the acquire+release workload on storeURL beside its anchor
// and returns the row, in µs per cycle (one worker each).
func (b *bench) cycleRow(t *benchTB, label, storeURL string) benchRow {
	fk := fake.New(nil)
	sys, closeSys, err := benchload.OpenSystem(t.ctx, storeURL, fk)
	if err != nil {
		t.Fatalf("lease %s: open: %v", label, err)
	}
	t.Cleanup(func() { _ = closeSys() })
	anchor, err := benchload.DriverCycles(t.ctx, fk, 1, b.leaseDur())
	if err != nil {
		live(t)
		t.Fatalf("lease %s: the bare driver: %v", label, err)
	}
	ours, err := benchload.AcquireRelease(t.ctx, sys, 1, b.leaseDur())
	if err != nil {
		live(t)
		t.Fatalf("lease %s: %v", label, err)
	}
	return row(t, "lease acquire+release ("+label+")", "fake driver acquire+destroy", "µs",
		1e6/ours.OpsPerSec, 1e6/anchor.OpsPerSec)
}

func (b *bench) leaseRows(t *benchTB) []benchRow {
	return []benchRow{
		b.cycleRow(t, "memory", "memory"),
		b.cycleRow(t, "SQLite", "sqlite://"+filepath.Join(t.TempDir(), "bench.db")),
	}
}

func (b *bench) leasePostgresRow(t *benchTB) []benchRow {
	return []benchRow{b.cycleRow(t, "PostgreSQL", testenv.Postgres(t))}
}

// replicaRows runs 1 and 8 host replicas (4 workers each) on one
// PostgreSQL with a 50 ms provider start, and at zero delay: aggregate
// cycles per second, 8 replicas against one (higher is better). A reuse
// key with two sandboxes or a cleanup processed twice fails the workload.
func (b *bench) replicaRows(t *benchTB) []benchRow {
	dsn := testenv.Postgres(t)
	var rows []benchRow
	for _, delay := range []time.Duration{50 * time.Millisecond, 0} {
		var ops [2]float64
		for i, n := range []int{1, 8} {
			r, err := benchload.Replicas(t.ctx, dsn, n, 4, delay, b.leaseDur())
			if err != nil {
				live(t)
				t.Fatalf("%d replicas, provider delay %s: %v", n, delay, err)
			}
			if r.DoubleCreates != 0 || r.TwiceProcessed != 0 {
				t.Fatalf("%d replicas, provider delay %s: %d double creates of a reuse key, %d cleanups processed twice (LEASE-10)",
					n, delay, r.DoubleCreates, r.TwiceProcessed)
			}
			ops[i] = r.OpsPerSec
		}
		rows = append(rows, row(t, fmt.Sprintf("8 host replicas on one PostgreSQL (provider start %s)", delay),
			"1 replica", "cycles/s", ops[1], ops[0]))
	}
	return rows
}
