// Command apichanges writes the table of exported names that a change of
// the public API removed or renamed, from the difference between the api/
// files of a base commit and those of the work tree (internal/apicheck
// records them), for docs/api-changes.md:
//
//	go run ./internal/cmd/apichanges -base 38c212f -notes docs/api-changes.d > docs/api-changes.md
//
// A name is identified by its package, kind and name (a member by its type
// too), not by its signature: a name whose signature changed is listed as
// changed. What replaces a removed name comes from the notes: markdown
// tables in the files of -notes whose rows are "| old | replacement |",
// old written as `pkg.Name` or `pkg.Type.Member` (pkg is the import path
// below the module, "berth" for the root). A removed name that no note
// names was unexported or removed because only berth itself used it.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

const module = "github.com/berthdev/berth"

// entry is one line of an api/ file.
type entry struct {
	key  string // pkg.Name or pkg.Type.Member, as the notes write it
	kind string // const, var, func, method, type, field
	line string // the recorded line, without "pkg P, "
}

var (
	lineRE   = regexp.MustCompile(`^pkg ([^,]+), (.*)$`)
	methodRE = regexp.MustCompile(`^method \(\*?([A-Za-z0-9_]+)(?:\[[^\]]*\])?\) ([A-Za-z0-9_]+)`)
	memberRE = regexp.MustCompile(`^type ([A-Za-z0-9_]+) (?:struct|interface), (?:embedded )?\*?([A-Za-z0-9_.]+)`)
	simpleRE = regexp.MustCompile(`^(const|var|func|type) ([A-Za-z0-9_]+)`)
	rowRE    = regexp.MustCompile("^\\|\\s*`?([^|`]+?)`?\\s*\\|\\s*(.+?)\\s*\\|\\s*$")
)

func parse(text string) map[string]entry {
	out := map[string]entry{}
	for _, l := range strings.Split(text, "\n") {
		m := lineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(m[1], module), "/")
		if pkg == "" {
			pkg = "berth"
		}
		rest := m[2]
		var e entry
		switch {
		case methodRE.MatchString(rest):
			mm := methodRE.FindStringSubmatch(rest)
			e = entry{key: pkg + "." + mm[1] + "." + mm[2], kind: "method"}
		case memberRE.MatchString(rest):
			mm := memberRE.FindStringSubmatch(rest)
			e = entry{key: pkg + "." + mm[1] + "." + mm[2], kind: "field"}
		case simpleRE.MatchString(rest):
			mm := simpleRE.FindStringSubmatch(rest)
			e = entry{key: pkg + "." + mm[2], kind: mm[1]}
		default:
			continue
		}
		e.line = rest
		out[e.key] = e
	}
	return out
}

// readBase reads the api/ files of a commit.
func readBase(base string) (string, error) {
	names, err := exec.Command("git", "ls-tree", "--name-only", base, "api/").Output()
	if err != nil {
		return "", fmt.Errorf("git ls-tree %s api/: %w", base, err)
	}
	var b strings.Builder
	for _, n := range strings.Fields(string(names)) {
		text, err := exec.Command("git", "show", base+":"+n).Output()
		if err != nil {
			return "", fmt.Errorf("git show %s:%s: %w", base, n, err)
		}
		b.Write(text)
	}
	return b.String(), nil
}

func readDir(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, e := range ents {
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		b.Write(text)
	}
	return b.String(), nil
}

// readNotes reads the replacement rows of the notes' tables.
func readNotes(dir string) (map[string]string, error) {
	notes := map[string]string{}
	if dir == "" {
		return notes, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			m := rowRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
			if m == nil || strings.HasPrefix(m[1], "-") || strings.EqualFold(m[1], "removed or renamed") {
				continue
			}
			for _, old := range strings.Split(m[1], ",") {
				old = strings.Trim(strings.TrimSpace(old), "`")
				if old != "" {
					notes[old] = m[2]
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return notes, nil
}

func write(w io.Writer, base string, old, now map[string]entry, notes map[string]string) {
	var removed, changed, added []string
	for k, e := range old {
		if n, ok := now[k]; !ok {
			removed = append(removed, k)
		} else if n.line != e.line {
			changed = append(changed, k)
		}
	}
	for k := range now {
		if _, ok := old[k]; !ok {
			added = append(added, k)
		}
	}
	sort.Strings(removed)
	sort.Strings(changed)
	sort.Strings(added)
	fmt.Fprintf(w, "# Public API changes\n\n")
	fmt.Fprintf(w, "Generated from the difference between the api/ files of %s and of this tree:\n\n", base)
	fmt.Fprintf(w, "    go run ./internal/cmd/apichanges -base %s -notes docs/api-changes.d > docs/api-changes.md\n\n", base)
	fmt.Fprintf(w, "%d names removed or renamed, %d changed, %d added (%d recorded before, %d now). ", len(removed), len(changed), len(added), len(old), len(now))
	fmt.Fprintf(w, "A removed name with no replacement was used only by berth's own packages; the notes that name replacements are in docs/api-changes.d/.\n\n")
	fmt.Fprintf(w, "## Removed or renamed\n\n| name | kind | replaced by |\n|---|---|---|\n")
	for _, k := range removed {
		r := notes[k]
		if r == "" {
			r = "— (only berth used it)"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s |\n", k, old[k].kind, r)
	}
	fmt.Fprintf(w, "\n## Changed signatures\n\n| name | was | now |\n|---|---|---|\n")
	for _, k := range changed {
		fmt.Fprintf(w, "| `%s` | `%s` | `%s` |\n", k, old[k].line, now[k].line)
	}
	fmt.Fprintf(w, "\n## Added\n\n| name | recorded as |\n|---|---|\n")
	for _, k := range added {
		fmt.Fprintf(w, "| `%s` | `%s` |\n", k, now[k].line)
	}
}

func main() {
	base := flag.String("base", "", "the commit whose api/ files are the old API")
	notes := flag.String("notes", "", "a directory of markdown notes naming replacements")
	flag.Parse()
	if *base == "" {
		fmt.Fprintln(os.Stderr, "apichanges: -base is required")
		os.Exit(2)
	}
	oldText, err := readBase(*base)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apichanges:", err)
		os.Exit(1)
	}
	nowText, err := readDir("api")
	if err != nil {
		fmt.Fprintln(os.Stderr, "apichanges:", err)
		os.Exit(1)
	}
	n, err := readNotes(*notes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apichanges:", err)
		os.Exit(1)
	}
	write(os.Stdout, *base, parse(oldText), parse(nowText), n)
}
