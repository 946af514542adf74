package main

import (
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/apiload"
)

// TestBenchAPILoadQuick runs `bench --quick --json --only api-load` at
// the suite's size (apiload.Small: 4 clients for 2 s on PostgreSQL), a
// check of the row's wiring: internal/apiload's TestAPILoad tests the
// harness. The workload itself fails on an error other than 429 or an
// output stream not read whole; the test checks that it ran (four
// measured rows, every request answered 2xx or 429) and never a time.
func TestBenchAPILoadQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the example server for 2 s")
	}
	old := quickAPILoad
	quickAPILoad = apiload.Small
	t.Cleanup(func() { quickAPILoad = old })
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "api-load")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("bench --only api-load printed %d rows, want 4:\n%s\n%s", len(rows), out, errOut)
	}
	for _, r := range rows {
		if r.Skipped != "" {
			t.Fatalf("row %q skipped: %s", r.Workload, r.Skipped)
		}
		checkMeasured(t, r)
		if strings.HasSuffix(r.Workload, ": answered 2xx or 429") && r.Ratio != 1 {
			t.Errorf("row %q: answered/requests = %v, want 1 (no error but 429)", r.Workload, r.Ratio)
		}
	}
	if !strings.Contains(errOut, " 0 errors;") || !strings.Contains(errOut, "kept up true") {
		t.Errorf("stderr lacks 0 errors or kept up true:\n%s", errOut)
	}
}
