package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// services are the service types of the library, by package directory:
// their exported methods are entry points that act for someone (issue 24,
// CONVENTIONS 18 and 24). A new service (the custom-images service when it
// lands) gets a row. Handles (lease.Handle, lease.Task) are not services:
// they are the authority granted when they were opened, and their methods
// take no principal.
var services = map[string][]string{
	"environment": {"Catalog", "Assignments"},
	"lease":       {"Manager"},
	"probe":       {"Prober"},
	"handover":    {"Service"},
	"instance":    {"Service"},
}

// principalExempt lists the exported service methods that take no
// principal after their context, each with the reason it needs none. Keep
// it short: a method that reads or changes a record, or acts on a lease, a
// session or an environment, takes the principal and asks the Authorizer;
// a hook one service gives another is wired by berth.New, not exported.
var principalExempt = map[string]string{}

// Issue 24 item 1 (CONVENTIONS 18, 24): every exported method of a service
// type takes an authz.Principal right after its context.Context, unless it
// is on principalExempt with a reason.
func TestServiceMethodsTakeThePrincipal(t *testing.T) {
	t.Parallel()
	var bad []string
	seen := map[string]bool{}
	for dir, types := range services {
		isService := map[string]bool{}
		for _, ty := range types {
			isService[ty] = true
		}
		found := map[string]bool{}
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			p := filepath.Join(root, dir, n)
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			authzName := importName(f, "github.com/berthdev/berth/authz")
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil || !fd.Name.IsExported() {
					continue
				}
				recv := receiver(fd.Recv.List[0].Type)
				if !isService[recv] {
					continue
				}
				found[recv] = true
				key := dir + "." + recv + "." + fd.Name.Name
				seen[key] = true
				if _, ok := principalExempt[key]; ok {
					continue
				}
				if !takesPrincipal(fd.Type, authzName) {
					bad = append(bad, filepath.Join(dir, n)+":"+strconv.Itoa(fset.Position(fd.Pos()).Line)+": "+key+" takes no authz.Principal after its context")
				}
			}
		}
		for _, ty := range types {
			if !found[ty] {
				t.Errorf("service type %s.%s has no exported method: is the list out of date?", dir, ty)
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	for key := range principalExempt {
		if !seen[key] {
			t.Errorf("principalExempt names %s, which is no exported service method: remove it", key)
		}
	}
}

// importName is the name under which f imports path ("" if it does not).
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == path {
			if im.Name != nil {
				return im.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}

// takesPrincipal reports whether ft's first parameter is a context.Context
// and its second an authz.Principal.
func takesPrincipal(ft *ast.FuncType, authzName string) bool {
	var types []ast.Expr
	for _, fl := range ft.Params.List {
		n := max(len(fl.Names), 1)
		for range n {
			types = append(types, fl.Type)
		}
	}
	if len(types) < 2 || authzName == "" {
		return false
	}
	return isSel(types[0], "context", "Context") && isSel(types[1], authzName, "Principal")
}

func isSel(e ast.Expr, pkg, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := s.X.(*ast.Ident)
	return ok && x.Name == pkg && s.Sel.Name == name
}
