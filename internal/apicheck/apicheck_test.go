package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// root is the module root, relative to this package's directory.
const root = "../.."

// decl is one exported declaration of the module's non-test source.
type decl struct {
	pos        string // file:line, relative to the module root
	what       string // "func Name", "method T.Name", "type T", "const C", "var V"
	documented bool
	isVar      bool
	errVar     bool // a var named Err... (a sentinel error)
	internal   bool // in an internal package
}

// exported parses every non-test .go file of the module (the examples and
// testdata trees left out) and lists its exported declarations.
func exported(t *testing.T) []decl {
	t.Helper()
	var out []decl
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if n := de.Name(); p != root && (n == "examples" || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil // a generator's output (protoc's): its conventions are the generator's
		}
		rel, _ := filepath.Rel(root, p)
		at := func(pos token.Pos) string { return rel + ":" + strconv.Itoa(fset.Position(pos).Line) }
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				what := "func " + d.Name.Name
				if d.Recv != nil {
					recv := receiver(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue // shown nowhere in the package's docs
					}
					what = "method " + recv + "." + d.Name.Name
				}
				out = append(out, decl{pos: at(d.Pos()), what: what, documented: d.Doc != nil})
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							out = append(out, decl{pos: at(s.Pos()), what: "type " + s.Name.Name, documented: s.Doc != nil || d.Doc != nil})
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							out = append(out, decl{
								pos: at(n.Pos()), what: d.Tok.String() + " " + n.Name,
								documented: s.Doc != nil || s.Comment != nil || d.Doc != nil,
								isVar:      d.Tok == token.VAR, errVar: strings.HasPrefix(n.Name, "Err"),
								internal: strings.HasPrefix(rel, "internal"+string(filepath.Separator)),
							})
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no exported declarations found under %s", root)
	}
	return out
}

func receiver(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiver(e.X)
	case *ast.IndexExpr:
		return receiver(e.X)
	case *ast.IndexListExpr:
		return receiver(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// CONVENTIONS 13: every exported name has a doc comment (a const or var in
// a group is covered by the group's comment or its own).
func TestEveryExportedNameIsDocumented(t *testing.T) {
	t.Parallel()
	for _, d := range exported(t) {
		if !d.documented {
			t.Errorf("%s: %s has no doc comment", d.pos, d.what)
		}
	}
}

// CONVENTIONS 9: no exported mutable package state. A public package
// exports variables only for sentinel errors (Err...); a default or a table
// is a constant or a function. (Internal packages are test helpers and
// shared code that no adopter can reach.)
func TestNoExportedVariablesButSentinelErrors(t *testing.T) {
	t.Parallel()
	for _, d := range exported(t) {
		if d.isVar && !d.errVar && !d.internal {
			t.Errorf("%s: exported %s: make it a constant or a function", d.pos, d.what)
		}
	}
}
