package apicheck

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
)

// The public API is recorded under api/ at the module root (CONVENTIONS 27,
// as Go's own api/go1.*.txt): one file per public package, one line per
// exported name with its signature. TestAPIIsRecorded fails when the code and
// the files differ; regenerate them with the command below and let the diff
// show in review.
const (
	module    = "github.com/berthdev/berth"
	apiDir    = root + "/api"
	updateCmd = "go test ./internal/apicheck -run TestAPIIsRecorded -update"
)

var update = flag.Bool("update", false, "rewrite the api/ files from the code")

// surface is the recorded API of one public package.
type surface struct {
	path  string   // import path relative to the module ("" is the root package)
	lines []string // sorted "kind signature" lines, one per exported name
	// counts by kind of name: func, type, const, var, method, field
	counts   map[string]int
	short    int // lines `go doc -short` prints for the package
	examples int // Example functions in its tests
}

func (s *surface) names() int {
	n := 0
	for _, c := range s.counts {
		n += c
	}
	return n
}

// fileName is the api/ file of the package: its path with "/" as ".", and
// "berth" for the root package.
func (s *surface) fileName() string {
	if s.path == "" {
		return "berth.txt"
	}
	return strings.ReplaceAll(s.path, "/", ".") + ".txt"
}

// publicPackages lists the directories of the module's public packages:
// every package outside internal/, examples/ and testdata.
func publicPackages(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.IsDir() {
			return nil
		}
		n := de.Name()
		if p != root && (n == "internal" || n == "examples" || n == "testdata" || n == "api" || n == "docs" || strings.HasPrefix(n, ".")) {
			return filepath.SkipDir
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
				rel, _ := filepath.Rel(root, p)
				if rel == "." {
					rel = ""
				}
				dirs = append(dirs, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dirs)
	return dirs
}

// readSurface parses the package in dir and records its exported names.
func readSurface(t *testing.T, dir string) *surface {
	t.Helper()
	fset := token.NewFileSet()
	abs := filepath.Join(root, dir)
	// The files of the package as built here (build tags applied), tests
	// left out.
	bp, err := build.ImportDir(abs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bp.Name == "main" {
		return nil // a command has no API
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(abs, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b *ast.File) int {
		return strings.Compare(fset.File(a.Pos()).Name(), fset.File(b.Pos()).Name())
	})
	importPath := module
	if dir != "" {
		importPath += "/" + dir
	}
	dp, err := doc.NewFromFiles(fset, files, importPath)
	if err != nil {
		t.Fatal(err)
	}
	s := &surface{path: dir, counts: map[string]int{}}
	add := func(kind, line string) {
		s.counts[kind]++
		s.lines = append(s.lines, line)
	}
	str := func(n ast.Node) string {
		var b bytes.Buffer
		if err := printer.Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(b.String()), " ")
	}
	values := func(kind string, vs []*doc.Value) {
		for _, v := range vs {
			s.short++
			var typ ast.Expr
			for _, sp := range v.Decl.Specs {
				vs := sp.(*ast.ValueSpec)
				if vs.Type != nil || len(vs.Values) > 0 {
					typ = vs.Type // an implicit repetition keeps the type before it
				}
				for _, n := range vs.Names {
					if !n.IsExported() {
						continue
					}
					line := kind + " " + n.Name
					if typ != nil {
						line += " " + str(typ)
					}
					add(kind, line)
				}
			}
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			s.short++
			add("func", "func "+f.Name+signature(str, f.Decl.Type))
		}
	}
	values("const", dp.Consts)
	values("var", dp.Vars)
	funcs(dp.Funcs)
	for _, ty := range dp.Types {
		s.short++
		spec := typeSpec(ty)
		values("const", ty.Consts)
		values("var", ty.Vars)
		funcs(ty.Funcs)
		head := "type " + ty.Name
		switch tt := spec.Type.(type) {
		case *ast.StructType:
			add("type", head+" struct")
			for _, f := range tt.Fields.List {
				if len(f.Names) == 0 {
					if ast.IsExported(embeddedName(f.Type)) {
						add("field", head+" struct, embedded "+str(f.Type))
					}
					continue
				}
				for _, n := range f.Names {
					if n.IsExported() {
						add("field", head+" struct, "+n.Name+" "+str(f.Type))
					}
				}
			}
		case *ast.InterfaceType:
			add("type", head+" interface")
			for _, m := range tt.Methods.List {
				if len(m.Names) == 0 {
					add("field", head+" interface, embedded "+str(m.Type))
					continue
				}
				for _, n := range m.Names {
					if n.IsExported() {
						add("method", head+" interface, "+n.Name+signature(str, m.Type.(*ast.FuncType)))
					}
				}
			}
		default:
			if spec.Assign.IsValid() {
				add("type", head+" = "+str(spec.Type))
			} else {
				add("type", head+" "+str(spec.Type))
			}
		}
		for _, m := range ty.Methods {
			recv := str(m.Decl.Recv.List[0].Type)
			add("method", "method ("+recv+") "+m.Name+signature(str, m.Decl.Type))
		}
	}
	sort.Strings(s.lines)
	s.examples = countExamples(t, abs)
	return s
}

// typeSpec finds the spec of ty in its declaration.
func typeSpec(ty *doc.Type) *ast.TypeSpec {
	for _, sp := range ty.Decl.Specs {
		if ts := sp.(*ast.TypeSpec); ts.Name.Name == ty.Name {
			return ts
		}
	}
	panic("no spec for type " + ty.Name)
}

func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// signature prints a function type without parameter names, as Go's api
// files do: "(context.Context, string) (*T, error)".
func signature(str func(ast.Node) string, ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) []string {
		if fl == nil {
			return nil
		}
		var out []string
		for _, f := range fl.List {
			for range max(len(f.Names), 1) {
				out = append(out, str(f.Type))
			}
		}
		return out
	}
	tparams := ""
	if ft.TypeParams != nil {
		var tp []string
		for _, f := range ft.TypeParams.List {
			for _, n := range f.Names {
				tp = append(tp, n.Name+" "+str(f.Type))
			}
		}
		tparams = "[" + strings.Join(tp, ", ") + "]"
	}
	sig := tparams + "(" + strings.Join(list(ft.Params), ", ") + ")"
	switch res := list(ft.Results); len(res) {
	case 0:
	case 1:
		sig += " " + res[0]
	default:
		sig += " (" + strings.Join(res, ", ") + ")"
	}
	return sig
}

// countExamples counts the Example functions of the package's tests.
func countExamples(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Example") {
				n++
			}
		}
	}
	return n
}

func surfaces(t *testing.T) []*surface {
	t.Helper()
	var out []*surface
	for _, dir := range publicPackages(t) {
		if s := readSurface(t, dir); s != nil {
			out = append(out, s)
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d public packages under %s; the walk is wrong", len(out), root)
	}
	return out
}

func (s *surface) text() string {
	importPath := module
	if s.path != "" {
		importPath += "/" + s.path
	}
	var b strings.Builder
	for _, l := range s.lines {
		fmt.Fprintf(&b, "pkg %s, %s\n", importPath, l)
	}
	return b.String()
}

// CONVENTIONS 27: every exported name of a public package is recorded under
// api/, and a change to the API is a change to those files.
func TestAPIIsRecorded(t *testing.T) {
	ss := surfaces(t)
	want := map[string]string{}
	for _, s := range ss {
		want[s.fileName()] = s.text()
	}
	if *update {
		if err := os.RemoveAll(apiDir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(apiDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range want {
			if err := os.WriteFile(filepath.Join(apiDir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	got := map[string]string{}
	ents, err := os.ReadDir(apiDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(apiDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = string(b)
	}
	var diff []string
	for _, name := range sortedKeys(want, got) {
		w, g := lineSet(want[name]), lineSet(got[name])
		for _, l := range sortedKeys(g, nil) {
			if !w[l] {
				diff = append(diff, "-"+l)
			}
		}
		for _, l := range sortedKeys(w, nil) {
			if !g[l] {
				diff = append(diff, "+"+l)
			}
		}
		if want[name] == "" && got[name] != "" {
			diff = append(diff, "-api/"+name+" (no such public package)")
		}
	}
	if len(diff) > 0 {
		t.Errorf("the public API differs from api/ (- recorded, + in the code):\n%s\nIf the change is meant, regenerate the files and let the diff show in review:\n\t%s",
			strings.Join(diff, "\n"), updateCmd)
	}
}

func lineSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			m[l] = true
		}
	}
	return m
}

func sortedKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestAPICounts prints the size of the public surface: names per package by
// kind and in all (functions, types, constants, variables, methods, fields
// and interface methods), the lines `go doc -short` prints, and the Example
// functions. `make test` prints it; it asserts only that the count ran.
func TestAPICounts(t *testing.T) {
	ss := surfaces(t)
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "package\tnames\tfunc\ttype\tconst\tvar\tmethod\tfield\tdoc-short\texamples\t")
	var total surface
	total.counts = map[string]int{}
	for _, s := range ss {
		p := s.path
		if p == "" {
			p = "berth"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p, s.names(), s.counts["func"], s.counts["type"], s.counts["const"], s.counts["var"], s.counts["method"], s.counts["field"], s.short, s.examples)
		for k, v := range s.counts {
			total.counts[k] += v
		}
		total.short += s.short
		total.examples += s.examples
	}
	fmt.Fprintf(w, "all %d packages\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", len(ss), total.names(), total.counts["func"], total.counts["type"], total.counts["const"], total.counts["var"], total.counts["method"], total.counts["field"], total.short, total.examples)
	w.Flush()
	t.Logf("public API (api/):\n%s", b.String())
	if total.names() == 0 {
		t.Fatal("counted no exported names")
	}
}
