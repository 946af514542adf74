package berth_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// requirementFamilies are the families of requirement IDs
// (docs/requirements.md): CFG-4, LEASE-9, PRP-6, ...
var requirementFamilies = map[string]bool{
	"CFG": true, "CAP": true, "PRB": true, "QUAL": true, "IMG": true, "LEASE": true, "ASG": true,
	"PRP": true, "AUTH": true, "UI": true, "WS": true, "ISO": true, "PLG": true, "SCALE": true,
}

// findRequirementIDs returns the [start, end) offsets of every requirement
// ID in b: a family, a dash and a number, as a word of its own (not
// BERTH-EXEC-1 or CFG-8x). A scan for the dash, not a regexp: the test
// reads every Go file of the module and stays well under a second.
func findRequirementIDs(b []byte) [][2]int {
	word := func(c byte) bool {
		return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	}
	var found [][2]int
	for i := 0; ; i++ {
		d := bytes.IndexByte(b[i:], '-')
		if d < 0 {
			return found
		}
		i += d
		if i+1 >= len(b) || b[i+1] < '0' || b[i+1] > '9' {
			continue
		}
		start := i
		for start > 0 && 'A' <= b[start-1] && b[start-1] <= 'Z' {
			start--
		}
		end := i + 1
		for end < len(b) && '0' <= b[end] && b[end] <= '9' {
			end++
		}
		if !requirementFamilies[string(b[start:i])] || start > 0 && word(b[start-1]) || end < len(b) && word(b[end]) {
			continue
		}
		found = append(found, [2]int{start, end})
	}
}

// listedRequirements reads the IDs docs/requirements.md lists, one per line
// "- **ID** what berth guarantees.", and fails on an ID listed twice.
func listedRequirements(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("docs", "requirements.md"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^- \*\*([A-Z]+-[0-9]+)\*\* \S`)
	listed := map[string]bool{}
	for _, m := range line.FindAllStringSubmatch(string(b), -1) {
		if listed[m[1]] {
			t.Errorf("docs/requirements.md lists %s twice", m[1])
		}
		listed[m[1]] = true
	}
	return listed
}

// citedRequirement is one requirement ID in the Go source.
type citedRequirement struct {
	file string // slash-separated, relative to the module root
	line int
	id   string
}

// citedRequirements returns every requirement ID that a .go file under dir
// cites, in comments, test names and messages alike. An ID that is a whole
// string literal on its own ("WS-1" as a test's binding key) is a value, not
// a citation. Hidden directories are skipped.
func citedRequirements(t *testing.T, dir string) []citedRequirement {
	t.Helper()
	var cited []citedRequirement
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		for _, m := range findRequirementIDs(b) {
			if m[0] > 0 && m[1] < len(b) && b[m[0]-1] == '"' && b[m[1]] == '"' {
				continue
			}
			cited = append(cited, citedRequirement{
				file: filepath.ToSlash(rel),
				line: 1 + bytes.Count(b[:m[0]], []byte("\n")),
				id:   string(b[m[0]:m[1]]),
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return cited
}

// Every requirement ID the Go source cites is listed in
// docs/requirements.md, so that an ID in a comment or a message leads to
// what it requires.
func TestRequirementIDsAreDocumented(t *testing.T) {
	t.Parallel()
	listed := listedRequirements(t)
	if len(listed) < 50 {
		t.Fatalf("read %d requirement IDs from docs/requirements.md; its lines were not parsed", len(listed))
	}
	cited := citedRequirements(t, ".")
	if len(cited) < 500 {
		t.Fatalf("found %d requirement citations in the Go source; the walk looks at the wrong files", len(cited))
	}
	for _, c := range cited {
		if !listed[c.id] {
			t.Errorf("%s:%d cites %s, which docs/requirements.md does not list: add a line \"- **%s** what berth guarantees.\" under its family", c.file, c.line, c.id, c.id)
		}
	}
}

// The check finds a citation in a comment and in a message, and skips an ID
// that is a string literal of its own.
func TestRequirementCitationsAreFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := `package x

// Reuse (LEASE-4).
var a = "WS-1"

var b = "refused (CFG-6)" // not XCFG-7, CFG-8x, BERTH-EXEC-1 nor UI-
// PRP-1..8`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte("CAP-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range citedRequirements(t, dir) {
		got = append(got, c.file+":"+strconv.Itoa(c.line)+" "+c.id)
	}
	want := []string{"x.go:3 LEASE-4", "x.go:6 CFG-6", "x.go:7 PRP-1"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("citations = %q, want %q", got, want)
	}
}
