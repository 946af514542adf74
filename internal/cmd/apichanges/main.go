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
// tables in the files of -notes whose rows are "| old names | replacement |";
// a row covers a name when it names its package whole ("package `P`") or
// names the package's last element and the name's last element (so a row
// may list `lease.DefaultClaimGrace`, `DefaultPruneAfter` together). A
// removed name that no row covers was unexported because only berth's own
// packages used it.
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
	rowRE    = regexp.MustCompile(`^\|\s*(.+?)\s*\|\s*(.+?)\s*\|\s*$`)
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

// note is one row of a notes table: the names it covers, as written, and
// what replaces them.
type note struct{ names, replacement string }

// covers reports whether the row speaks of key (pkg.Name or
// pkg.Type.Member): it names the key's package whole ("package `P`"), or it
// names the package (by its last element) and the key's last element; with
// loose, a member is also covered by a row that names its type.
func (n note) covers(key string, loose bool) bool {
	pkg, name, _ := strings.Cut(key, ".")
	if strings.Contains(n.names, "package `"+pkg+"`") {
		return true
	}
	short := pkg[strings.LastIndex(pkg, "/")+1:]
	if !wordIn(n.names, short) {
		return false
	}
	typ, member, isMember := strings.Cut(name, ".")
	if !isMember {
		return wordIn(n.names, name)
	}
	return wordIn(n.names, member) || loose && wordIn(n.names, typ)
}

// wordIn reports whether w occurs in s between non-identifier characters.
func wordIn(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before, after := j == 0 || !isIdent(s[j-1]), j+len(w) == len(s) || !isIdent(s[j+len(w)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isIdent(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// readNotes reads the replacement rows of the notes' tables.
func readNotes(dir string) ([]note, error) {
	var notes []note
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
			notes = append(notes, note{names: m[1], replacement: m[2]})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return notes, nil
}

func write(w io.Writer, base string, old, now map[string]entry, notes []note) {
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
		r := "— (unexported: only berth's own packages used it)"
	find:
		for _, loose := range []bool{false, true} {
			for _, n := range notes {
				if n.covers(k, loose) {
					r = n.replacement
					break find
				}
			}
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
	notesDir := flag.String("notes", "", "a directory of markdown notes naming replacements")
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
	n, err := readNotes(*notesDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apichanges:", err)
		os.Exit(1)
	}
	write(os.Stdout, *base, parse(oldText), parse(nowText), n)
}
