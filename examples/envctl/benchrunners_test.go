package main

import (
	"strings"
	"testing"
)

// TestBenchRunnersQuick runs `bench --quick --json --only
// runners-1k,reconnect-storm`: 50 simulated runners streaming for 10 s
// into a System on SQLite and on PostgreSQL, and on PostgreSQL again with
// 5 of them dropped at once. The workloads themselves fail unless every
// session connected (and every dropped one reconnected) and every offered
// byte was stored, once; the test checks that they ran (seven measured
// rows, stored over offered exactly 1) and never a time.
func TestBenchRunnersQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("streams for 20 s")
	}
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "runners-1k,reconnect-storm")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	if len(rows) != 7 {
		t.Fatalf("bench --only runners-1k,reconnect-storm printed %d rows, want 7:\n%s\n%s", len(rows), out, errOut)
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
	if !strings.Contains(errOut, "connected=50 ") || !strings.Contains(errOut, "dropped=5 reconnected=5 ") {
		t.Errorf("stderr lacks connected=50 or dropped=5 reconnected=5:\n%s", errOut)
	}
}
