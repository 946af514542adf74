package berth_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/berthdev/berth"

// readmeFloors reads the floor of each package pattern from the README's
// package table: rows "| FLOOR | `pkg`, `pkg/{a,b}` | ... |". Paths are
// full import paths; "berth" is the module root.
func readmeFloors(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| (\d+) \| ([^|]+) \|`)
	tick := regexp.MustCompile("`([^`]+)`")
	floors := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		floor, _ := strconv.Atoi(m[1])
		for _, p := range tick.FindAllStringSubmatch(m[2], -1) {
			for _, path := range expandBraces(p[1]) {
				if path == "berth" {
					path = module
				} else {
					path = module + "/" + path
				}
				floors[path] = floor
			}
		}
	}
	return floors
}

// expandBraces expands one "{a,b,c}" group: "x/{a,b}" is x/a and x/b.
func expandBraces(p string) []string {
	i, j := strings.Index(p, "{"), strings.Index(p, "}")
	if i < 0 || j < i {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, p[:i]+alt+p[j+1:])
	}
	return out
}

// floorOf returns the floor of pkg: its own row, else its nearest parent
// directory's (the module root's row covers only the root package).
func floorOf(floors map[string]int, pkg string) (int, bool) {
	for p := pkg; ; {
		if f, ok := floors[p]; ok && (p == pkg || p != module) {
			return f, true
		}
		i := strings.LastIndex(p, "/")
		if i < 0 || p == module {
			return 0, false
		}
		p = p[:i]
	}
}

// upwardImports returns a problem for every import of a berth package from a
// lower floor than the importer's, and for every package without a floor.
func upwardImports(floors map[string]int, imports map[string][]string) []string {
	var problems []string
	for pkg, deps := range imports {
		from, ok := floorOf(floors, pkg)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no floor in the README's package table", pkg))
			continue
		}
		for _, dep := range deps {
			if dep != module && !strings.HasPrefix(dep, module+"/") {
				continue
			}
			to, ok := floorOf(floors, dep)
			if ok && to > from {
				problems = append(problems, fmt.Sprintf("%s (floor %d) imports %s (floor %d): imports only run downwards", pkg, from, dep, to))
			}
		}
	}
	return problems
}

// Issue 13 item 2: every package imports only packages of its floor or
// below, as the README's package table says; a package missing from the
// table fails too. Test files may import upwards (a suite runs drivers).
func TestImportsRunDownwards(t *testing.T) {
	t.Parallel()
	floors := readmeFloors(t)
	if len(floors) < 15 {
		t.Fatalf("read %d floors from README.md; the table was not parsed: %v", len(floors), floors)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	if _, ok := imports[module+"/store/internal/sqlstore"]; !ok || len(imports) < 20 {
		t.Fatalf("go list ./... listed %d packages, without store/internal/sqlstore; the check looks at the wrong graph", len(imports))
	}
	for _, p := range upwardImports(floors, imports) {
		t.Error(p)
	}
}

// The check fails on an upward import and on a package without a floor.
func TestUpwardImportsAreFound(t *testing.T) {
	t.Parallel()
	floors := readmeFloors(t)
	got := upwardImports(floors, map[string][]string{
		module + "/drivers":              {module + "/lease"},         // 1 -> 3
		module + "/lease/leasetest":      {module + "/lease"},         // a sub-package takes its parent's floor
		module + "/qualification":        {module + "/images", "net"}, // 0 -> 0
		module + "/nowhere":              nil,
		module + "/internal/testenv":     {module + "/store/internal/sqlstore"}, // 0 -> 6
		module + "/examples/envctl":      {module},                              // 6 -> 6
		module + "/drivers/daytona/fake": {module + "/internal/clock"},
	})
	want := []string{
		module + "/drivers (floor 1) imports " + module + "/lease (floor 3)",
		module + "/nowhere has no floor",
		module + "/internal/testenv (floor 0) imports " + module + "/store/internal/sqlstore (floor 6)",
	}
	if len(got) != len(want) {
		t.Fatalf("upwardImports found %d problems, want %d: %q", len(got), len(want), got)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, w)
		}
		if !found {
			t.Errorf("upwardImports did not report %q; it reported %q", w, got)
		}
	}
}
