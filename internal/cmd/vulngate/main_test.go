package main

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata/govulncheck-compress-v1.19.2.json is govulncheck v1.9.0's JSON
// output for berth with klauspost/compress v1.19.2, cut to four
// vulnerabilities at each level it reported them: GO-2026-6865 (compress,
// reachable, fixed in v1.20.2), GO-2026-4887 (docker/docker, reachable, no
// fix), GO-2026-6617 (standard library, reachable) and GO-2026-5617
// (docker/docker, imported but not called).

func readFindings(t *testing.T) []finding {
	t.Helper()
	f, err := os.Open("testdata/govulncheck-compress-v1.19.2.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	list, err := reachable(f)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestReachableKeepsOnlyCalledSymbols(t *testing.T) {
	t.Parallel()
	var got []string
	for _, f := range readFindings(t) {
		got = append(got, f.id+" "+f.module+"@"+f.version+" fixed "+f.fixed)
	}
	want := []string{
		"GO-2026-4887 github.com/docker/docker@v28.5.2+incompatible fixed ",
		"GO-2026-6617 stdlib@v1.26.8 fixed v1.26.9",
		"GO-2026-6865 github.com/klauspost/compress@v1.19.2 fixed v1.20.2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reachable findings (-want +got):\n%s", diff)
	}
}

var dockerAllowed = []allowed{{id: "GO-2026-4887", module: "github.com/docker/docker", reason: "daemon-side"}}

// An upgradable dependency fails the gate; the allowlisted one is printed
// with its reason; the standard library one is printed and does not fail.
func TestReportFailsOnAnUpgradableDependency(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := report(readFindings(t), dockerAllowed, &out)
	if err == nil {
		t.Fatalf("report passed with klauspost/compress v1.19.2 reachable:\n%s", out.String())
	}
	for _, want := range []string{
		"REACHABLE GO-2026-6865 in github.com/klauspost/compress@v1.19.2 (fixed in v1.20.2",
		"allowed GO-2026-4887 in github.com/docker/docker@v28.5.2+incompatible",
		": daemon-side",
		"standard library (the Go toolchain's matter, not failing): GO-2026-6617",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestReportPassesWhenOnlyAllowedAndStandardLibraryRemain(t *testing.T) {
	t.Parallel()
	var rest []finding
	for _, f := range readFindings(t) {
		if f.module != "github.com/klauspost/compress" {
			rest = append(rest, f)
		}
	}
	var out strings.Builder
	if err := report(rest, dockerAllowed, &out); err != nil {
		t.Errorf("report: %v\n%s", err, out.String())
	}
	// Without the allowlist entry the docker finding fails the gate.
	if err := report(rest, nil, &out); err == nil {
		t.Error("report passed a reachable docker/docker finding with an empty allowlist")
	}
	// An entry that matches nothing is reported for removal.
	out.Reset()
	stale := append([]allowed{{id: "GO-2000-0001", module: "example.com/gone", reason: "x"}}, dockerAllowed...)
	if err := report(rest, stale, &out); err != nil || !strings.Contains(out.String(), "GO-2000-0001 example.com/gone matches no reachable finding") {
		t.Errorf("stale allowlist entry: err %v, output:\n%s", err, out.String())
	}
}

func TestReadAllowlist(t *testing.T) {
	t.Parallel()
	list, err := readAllowlist("../../../govulncheck.allow")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range list {
		ids = append(ids, a.id+" "+a.module)
		if !strings.Contains(a.reason, "API 1.44") {
			t.Errorf("%s: the reason does not say why: %q", a.id, a.reason)
		}
	}
	want := []string{"GO-2026-4887 github.com/docker/docker", "GO-2026-4883 github.com/docker/docker"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("allowlist (-want +got):\n%s", diff)
	}
}
