package main

import (
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/runnerload"
)

// TestBenchRunnersQuick runs `bench --quick --json --only
// runners-1k,runners-10k-idle,reconnect-storm` at a size that checks the
// rows' wiring only (4 simulated runners streaming for 2 s into a System
// on SQLite and on PostgreSQL, 4 held idle for 1 s on SQLite, and on
// PostgreSQL again with one of them dropped):
// internal/runnerload's TestStorm tests the harness under load, and the
// --quick sizes (50 runners for 10 s, three runs) cost the suite minutes
// under -race. The workloads themselves fail unless every session
// connected (and every dropped one reconnected) and every offered byte
// was stored, once; the test checks that they ran (eight measured rows,
// stored over offered exactly 1) and never a time.
func TestBenchRunnersQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("streams for 6 s")
	}
	small := runnerload.Config{Sessions: 4, Rate: 40 << 10, Chunk: 4096, Duration: 2 * time.Second}
	storm := small
	storm.Storm = 0.25
	idle := runnerload.Config{Sessions: 4, Idle: true, Duration: time.Second}
	oldLoad, oldStorm, oldIdle := quickLoad, quickStorm, quickIdle
	quickLoad, quickStorm, quickIdle = small, storm, idle
	t.Cleanup(func() { quickLoad, quickStorm, quickIdle = oldLoad, oldStorm, oldIdle })
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "runners-1k,runners-10k-idle,reconnect-storm")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	if len(rows) != 8 {
		t.Fatalf("bench --only runners-1k,runners-10k-idle,reconnect-storm printed %d rows, want 8:\n%s\n%s", len(rows), out, errOut)
	}
	for _, r := range rows {
		if r.Skipped != "" {
			t.Fatalf("row %q skipped: %s", r.Workload, r.Skipped)
		}
		checkMeasured(t, r)
		if strings.HasSuffix(r.Workload, ": stored") && r.Ratio != 1 {
			t.Errorf("row %q: stored/offered = %v, want 1 (nothing lost)", r.Workload, r.Ratio)
		}
	}
	if !strings.Contains(errOut, "connected=4 ") || !strings.Contains(errOut, "dropped=1 reconnected=1 ") {
		t.Errorf("stderr lacks connected=4 or dropped=1 reconnected=1:\n%s", errOut)
	}
}
