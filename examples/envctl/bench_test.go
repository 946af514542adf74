package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/testenv"
)

// benchRows parses bench --json output: one object per line, each with
// exactly the row fields.
func benchRows(t *testing.T, out string) []benchRow {
	t.Helper()
	var rows []benchRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("bench --json line %q: %v", line, err)
		}
		for _, k := range []string{"workload", "anchor", "berth", "anchor_value", "unit", "ratio"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("bench --json row %q lacks %q", line, k)
			}
		}
		for k := range fields {
			switch k {
			case "workload", "anchor", "berth", "anchor_value", "unit", "ratio", "skipped":
			default:
				t.Errorf("bench --json row %q has an unknown field %q", line, k)
			}
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(line)))
		dec.DisallowUnknownFields()
		var r benchRow
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("bench --json line %q: %v", line, err)
		}
		if r.Workload == "" || r.Anchor == "" || r.Unit == "" {
			t.Errorf("bench row %+v: empty workload, anchor or unit", r)
		}
		rows = append(rows, r)
	}
	return rows
}

// checkMeasured: a measured row has positive, finite values and its ratio
// is berth / anchor (never a timing threshold).
func checkMeasured(t *testing.T, r benchRow) {
	t.Helper()
	for name, v := range map[string]float64{"berth": r.Berth, "anchor_value": r.AnchorValue, "ratio": r.Ratio} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("row %q vs %q: %s = %v, want a positive number", r.Workload, r.Anchor, name, v)
		}
	}
	if want := r.Berth / r.AnchorValue; math.Abs(r.Ratio-want) > 1e-3*math.Max(1, want) {
		t.Errorf("row %q: ratio %v, want berth/anchor = %v", r.Workload, r.Ratio, want)
	}
}

// TestBenchQuickJSON runs `bench --quick --json` for the cheap
// workloads, pins (a loopback registry in process) and ssh (the test
// sshd; skipped without one unless BERTH_REQUIRE_REAL=1), and checks the
// rows' shape; the pins row also checks that coalescing made fewer
// registry requests than 100 independent HEADs (a count, not a time).
func TestBenchQuickJSON(t *testing.T) {
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "pins,ssh")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("bench --only pins,ssh printed %d rows, want 4 (pins, ssh probe, execs vs ssh, execs vs ControlMaster):\n%s", len(rows), out)
	}
	for _, w := range []string{"pins", "ssh"} {
		if !strings.Contains(errOut, "envctl bench: "+w+" ...") {
			t.Errorf("stderr lacks the progress line of %s:\n%s", w, errOut)
		}
	}
	pins := rows[0]
	if pins.Skipped != "" || pins.Unit != "requests" {
		t.Fatalf("pins row %+v: want measured, in requests", pins)
	}
	checkMeasured(t, pins)
	if pins.Berth >= pins.AnchorValue {
		t.Errorf("pins: %v registry requests for 100 coalesced pins, not fewer than the %v of 100 independent HEADs", pins.Berth, pins.AnchorValue)
	}
	for _, r := range rows[1:] {
		if r.Skipped != "" {
			if testenv.RequireReal() {
				t.Errorf("row %q skipped under BERTH_REQUIRE_REAL=1: %s", r.Workload, r.Skipped)
			}
			continue
		}
		if r.Unit != "ms" {
			t.Errorf("row %q: unit %q, want ms", r.Workload, r.Unit)
		}
		checkMeasured(t, r)
	}
}

// TestBenchSkipsWithoutComponent: without OpenSSH's client on PATH the
// ssh rows are printed as skipped, each with the reason, and the command
// succeeds.
func TestBenchSkipsWithoutComponent(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "ssh")
	if err != nil {
		t.Fatalf("bench: %v\n%s%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want the 3 ssh rows:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if !strings.Contains(r.Skipped, "ssh") || !strings.Contains(r.Skipped, "not installed") {
			t.Errorf("row %q: skipped %q, want the missing ssh client named", r.Workload, r.Skipped)
		}
		if r.Berth != 0 || r.Ratio != 0 {
			t.Errorf("skipped row %q carries values: %+v", r.Workload, r)
		}
	}
	if !strings.Contains(errOut, "envctl bench: ssh skipped: ") {
		t.Errorf("stderr does not say ssh was skipped:\n%s", errOut)
	}
}

// TestBenchUnknownWorkload: --only with a name that is no workload is a
// usage error naming it.
func TestBenchUnknownWorkload(t *testing.T) {
	_, errOut, err := runCLI(t, "", "bench", "--only", "ssh,nope")
	if !errors.Is(err, errUsage) || !strings.Contains(errOut, `unknown workload "nope"`) {
		t.Fatalf("bench --only ssh,nope: %v, %q; want a usage error naming nope", err, errOut)
	}
}

// TestBenchLeaseRows runs the lease manager's rows (internal/benchload) for
// a short time: a lease cycle on memory and SQLite against the bare fake
// driver, in µs, and 8 replicas against one on PostgreSQL, in cycles/s
// (skipped without PostgreSQL unless BERTH_REQUIRE_REAL=1). The replica
// workload itself fails on a reuse key with two sandboxes or a cleanup
// processed twice.
func TestBenchLeaseRows(t *testing.T) {
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "lease,replicas")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("bench --only lease,replicas printed %d rows, want 4:\n%s", len(rows), out)
	}
	for i, r := range rows {
		want := "µs"
		if i >= 2 {
			want = "cycles/s"
		}
		if r.Unit != want {
			t.Errorf("row %q: unit %q, want %s", r.Workload, r.Unit, want)
		}
		if r.Skipped != "" {
			if i < 2 || testenv.RequireReal() {
				t.Errorf("row %q skipped: %s", r.Workload, r.Skipped)
			}
			continue
		}
		checkMeasured(t, r)
	}
	for _, w := range []string{"memory", "SQLite"} {
		if !strings.Contains(out, "lease acquire+release ("+w+")") {
			t.Errorf("no row for the lease cycle on %s:\n%s", w, out)
		}
	}
}

// TestBenchFilesRows runs the files rows at the quick scale (a 5 MiB tree
// of 500 files): a put into a Docker sandbox vs docker cp, and through
// the SSH driver vs tar over one x/crypto/ssh session and vs OpenSSH, in
// MB/s (each skipped without its component unless BERTH_REQUIRE_REAL=1).
// The workloads themselves fail when a put left a file out.
func TestBenchFilesRows(t *testing.T) {
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "files-docker,files-ssh")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	if len(rows) != 3 {
		t.Fatalf("bench --only files-docker,files-ssh printed %d rows, want 3:\n%s", len(rows), out)
	}
	anchors := []string{"docker cp", "tar c | x/crypto/ssh session tar x", "tar c | ssh host tar x (OpenSSH)"}
	for i, r := range rows {
		if r.Anchor != anchors[i] || !strings.HasPrefix(r.Workload, "files put 5 MiB in 500 files") || r.Unit != "MB/s" {
			t.Errorf("row %d: %+v, want the quick tree against %q in MB/s", i, r, anchors[i])
		}
		if r.Skipped != "" {
			if testenv.RequireReal() {
				t.Errorf("row %q skipped under BERTH_REQUIRE_REAL=1: %s", r.Workload, r.Skipped)
			}
			continue
		}
		checkMeasured(t, r)
	}
}

// TestBenchRunscRows runs the runsc rows at the quick scale (one round,
// five runner tasks): a Docker lease under runsc vs docker run --runtime
// runsc and vs the same lease under runc, a warm runsc pool's acquisition,
// and a runner task under runsc vs under runc and vs docker exec, in ms
// (skipped without the engine's runsc runtime unless
// BERTH_REQUIRE_REAL=1). The workload fails when a pooled lease was not
// adopted from the pool or a task did not exit 0.
func TestBenchRunscRows(t *testing.T) {
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "runsc")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	anchors := []string{"docker run --rm --runtime runsc IMAGE true", "the same lease under runc", "docker run --rm --runtime runsc IMAGE true",
		"docker run --rm --runtime runsc IMAGE true", "the same task under runc", "docker exec CONTAINER true (runsc)"}
	if len(rows) != len(anchors) {
		t.Fatalf("bench --only runsc printed %d rows, want %d:\n%s", len(rows), len(anchors), out)
	}
	for i, r := range rows {
		if r.Anchor != anchors[i] || !strings.Contains(r.Workload, "under runsc") || r.Unit != "ms" {
			t.Errorf("row %d: %+v, want a row under runsc against %q in ms", i, r, anchors[i])
		}
		if r.Skipped != "" {
			if testenv.RequireReal() {
				t.Errorf("row %q skipped under BERTH_REQUIRE_REAL=1: %s", r.Workload, r.Skipped)
			}
			continue
		}
		checkMeasured(t, r)
	}
}

// TestBenchPluginRows runs the plugin rows at the quick scale (three
// execs a side, one 2 MiB stream, three rounds of 50 fake calls): the
// Docker driver through its plugin vs compiled in, in ms and MB/s, and the
// boundary's cost per call in µs (skipped without a Docker engine unless
// BERTH_REQUIRE_REAL=1). The workload itself fails when a stream lost a
// byte or a fake exec answered wrong.
func TestBenchPluginRows(t *testing.T) {
	out, errOut, err := runCLI(t, "", "bench", "--quick", "--json", "--only", "plugin")
	if err != nil {
		t.Fatalf("bench: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rows := benchRows(t, out)
	want := []struct{ prefix, anchor, unit string }{
		{"plugin-exec: ", "the same exec, the Docker driver compiled in", "ms"},
		{"plugin-stream: 2 MiB ", "the same stream, the Docker driver compiled in", "MB/s"},
		{"plugin-call: ", "a fake exec, compiled in", "µs"},
	}
	if len(rows) != len(want) {
		t.Fatalf("bench --only plugin printed %d rows, want %d:\n%s", len(rows), len(want), out)
	}
	for i, r := range rows {
		if !strings.HasPrefix(r.Workload, want[i].prefix) || r.Anchor != want[i].anchor || r.Unit != want[i].unit {
			t.Errorf("row %d: %+v, want %q... against %q in %s", i, r, want[i].prefix, want[i].anchor, want[i].unit)
		}
		if r.Skipped != "" {
			if testenv.RequireReal() {
				t.Errorf("row %q skipped under BERTH_REQUIRE_REAL=1: %s", r.Workload, r.Skipped)
			}
			continue
		}
		checkMeasured(t, r)
	}
}
