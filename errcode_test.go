package berth_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/runnerbin"
	"github.com/berthdev/berth/templates"
)

// sentinelCodes is every exported sentinel error of every public package
// with its code (issue 24 item 3). A host maps codes to statuses, so a
// code is part of the API: a new sentinel needs a row here, and a changed
// code shows in review.
var sentinelCodes = map[string]struct {
	err  error
	code errcode.ErrorCode
}{
	"errcode.ErrNotFound":                  {errcode.ErrNotFound, errcode.NotFound},
	"errcode.ErrAlreadyExists":             {errcode.ErrAlreadyExists, errcode.AlreadyExists},
	"errcode.ErrConflict":                  {errcode.ErrConflict, errcode.Conflict},
	"errcode.ErrDenied":                    {errcode.ErrDenied, errcode.Denied},
	"errcode.ErrInvalid":                   {errcode.ErrInvalid, errcode.Invalid},
	"drivers.ErrUnreachable":               {drivers.ErrUnreachable, errcode.Unreachable},
	"drivers.ErrTLSUnverified":             {drivers.ErrTLSUnverified, errcode.AuthFailed},
	"drivers.ErrAuth":                      {drivers.ErrAuth, errcode.AuthFailed},
	"drivers.ErrHostKeyMismatch":           {drivers.ErrHostKeyMismatch, errcode.AuthFailed},
	"drivers.ErrHostKeyUnknown":            {drivers.ErrHostKeyUnknown, errcode.AuthFailed},
	"drivers.ErrImageNotFound":             {drivers.ErrImageNotFound, errcode.NotFound},
	"drivers.ErrImageInactive":             {drivers.ErrImageInactive, errcode.Unavailable},
	"drivers.ErrTransient":                 {drivers.ErrTransient, errcode.Unavailable},
	"drivers.ErrUnsupported":               {drivers.ErrUnsupported, errcode.Unsupported},
	"drivers.ErrUnavailable":               {drivers.ErrUnavailable, errcode.Unavailable},
	"drivers.ErrTimeout":                   {drivers.ErrTimeout, errcode.Timeout},
	"drivers/config.ErrInvalid":            {config.ErrInvalid, errcode.Invalid},
	"drivers/config.ErrCredentialsMissing": {config.ErrCredentialsMissing, errcode.Invalid},
	"drivers.ErrReleased":                  {drivers.ErrReleased, errcode.Conflict},
	"drivers.ErrInUse":                     {drivers.ErrInUse, errcode.Conflict},

	"environment.ErrNoBinding":      {environment.ErrNoBinding, errcode.NotFound},
	"environment.ErrArchived":       {environment.ErrArchived, errcode.Conflict},
	"environment.ErrTargetMismatch": {environment.ErrTargetMismatch, errcode.Conflict},

	"lease.ErrClaimed":           {lease.ErrClaimed, errcode.Conflict},
	"lease.ErrCleanupPending":    {lease.ErrCleanupPending, errcode.Unavailable},
	"lease.ErrQuota":             {lease.ErrQuota, errcode.Unavailable},
	"templates.ErrSessionActive": {templates.ErrSessionActive, errcode.Conflict},

	"instance.ErrEnvironmentsDisabled": {instance.ErrEnvironmentsDisabled, errcode.Unavailable},
	"instance.ErrManagedSandboxOnly":   {instance.ErrManagedSandboxOnly, errcode.Unavailable},

	"handover.ErrStale":    {handover.ErrStale, errcode.Conflict},
	"handover.ErrMismatch": {handover.ErrMismatch, errcode.Conflict},

	"runnerbin.ErrNoSource": {runnerbin.ErrNoSource, errcode.Unsupported},
	"runnerbin.ErrNoGo":     {runnerbin.ErrNoGo, errcode.Unsupported},
}

// errorTypeCodes is every exported error type of every public package, as
// it is returned, with the code Code finds in it: the type's own
// ErrorCode, or the sentinel it wraps.
var errorTypeCodes = map[string]struct {
	err  error
	code errcode.ErrorCode
}{
	"errcode.Error":                   {&errcode.Error{Code: errcode.Conflict, Target: "x", Err: errcode.ErrNotFound}, errcode.Conflict},
	"drivers/config.Error":            {&config.Error{Driver: "ssh", Field: "host", Reason: "required"}, errcode.Invalid},
	"environment.ConfigError":         {&environment.ConfigError{Name: "e", Err: &config.Error{Driver: "ssh", Field: "host", Reason: "required"}}, errcode.Invalid},
	"environment.Error":               {&environment.Error{Field: "name", Reason: "taken", Err: errcode.ErrConflict}, errcode.Conflict},
	"environment.Error (binding)":     {&environment.Error{Reason: "another company's", Err: errcode.ErrDenied}, errcode.Denied},
	"environment.Error (unusable)":    {&environment.Error{Reason: "driver not registered", Err: drivers.ErrUnavailable}, errcode.Unavailable},
	"authz.Denied (func, not a type)": {authz.Denied(authz.Principal{ID: "a", Role: authz.RoleAgent}, authz.ActionDelete, authz.Resource{}), errcode.Denied},
}

// publicDecls parses every non-test .go file of the module's public
// packages (internal, examples and testdata trees left out) and returns
// the exported package-level vars named Err... and the exported types
// named ...Error, each as
// "pkg/path.Name" (the path relative to the module root).
func publicDecls(t *testing.T) (sentinels, errTypes []string) {
	t.Helper()
	err := filepath.WalkDir(".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if n := de.Name(); p != "." && (n == "internal" || n == "examples" || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(p))
		if pkg == "." {
			pkg = "berth"
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() && strings.HasSuffix(s.Name.Name, "Error") {
						errTypes = append(errTypes, pkg+"."+s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if g.Tok == token.VAR && n.IsExported() && strings.HasPrefix(n.Name, "Err") {
							sentinels = append(sentinels, pkg+"."+n.Name)
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
	sort.Strings(sentinels)
	sort.Strings(errTypes)
	return sentinels, errTypes
}

// Every exported sentinel of every public package carries its code, and
// the table lists each one: a new sentinel without a row (or without a
// code) fails here. errors.Is still finds each sentinel by identity.
func TestEverySentinelCarriesItsCode(t *testing.T) {
	t.Parallel()
	sentinels, _ := publicDecls(t)
	// 34 when issue 48 landed: a walk that finds far fewer is broken.
	if len(sentinels) < 30 {
		t.Fatalf("found %d sentinels; the source walk is broken", len(sentinels))
	}
	found := map[string]bool{}
	for _, name := range sentinels {
		found[name] = true
		if _, ok := sentinelCodes[name]; !ok {
			t.Errorf("%s is an exported sentinel without a row in sentinelCodes: declare it with errcode.New and add its code", name)
		}
	}
	for name, tc := range sentinelCodes {
		if !found[name] {
			t.Errorf("sentinelCodes lists %s, which the source does not declare", name)
			continue
		}
		if got := errcode.Code(tc.err); got != tc.code {
			t.Errorf("errcode.Code(%s) = %v, want %v", name, got, tc.code)
		}
		if tc.code == errcode.OK || tc.code == errcode.Unknown {
			t.Errorf("%s: a sentinel's code must say something, not %v", name, tc.code)
		}
		wrapped := fmt.Errorf("context naming the target: %w", tc.err)
		if got := errcode.Code(wrapped); got != tc.code || !errors.Is(wrapped, tc.err) {
			t.Errorf("%s wrapped: Code = %v, errors.Is = %v; want %v, true", name, got, errors.Is(wrapped, tc.err), tc.code)
		}
	}
	// Every sentinel is its code's one sentinel (errors.Is) when the code
	// has one, and no other sentinel of the table: a package's sentinel is
	// finer, never the same error as another package's.
	for a, x := range sentinelCodes {
		if s := codeSentinel(x.code); s != nil && !errors.Is(x.err, s) {
			t.Errorf("errors.Is(%s, the sentinel of %v) = false", a, x.code)
		}
		for b, y := range sentinelCodes {
			if a != b && errors.Is(x.err, y.err) && !strings.HasPrefix(b, "errcode.") && !strings.HasPrefix(a, "environment.Err") {
				t.Errorf("errors.Is(%s, %s) holds", a, b)
			}
		}
	}
}

// codeSentinel returns errcode's sentinel of c, nil for a code without
// one.
func codeSentinel(c errcode.ErrorCode) error {
	for name, s := range sentinelCodes {
		if strings.HasPrefix(name, "errcode.") && s.code == c {
			return s.err
		}
	}
	return nil
}

// The driver contract's sentinels carry their PRB-5 code as their reason,
// so errcode.ReasonOf and internal/reason.Of agree on them (the runner
// protocol's carry their wire code: internal/prpwire's test).
func TestDriverSentinelsCarryTheirReason(t *testing.T) {
	t.Parallel()
	for name, tc := range sentinelCodes {
		if !strings.HasPrefix(name, "drivers") {
			continue
		}
		want := reason.Of(tc.err)
		if want == reason.Internal || want == reason.NotFound || name == "drivers.ErrReleased" || name == "drivers.ErrInUse" {
			continue
		}
		err := fmt.Errorf("ssh root@h:22: %w", tc.err)
		if got := errcode.ReasonOf(err); got != string(want) {
			t.Errorf("ReasonOf(%s) = %q, want %q", name, got, want)
		}
	}
}

// Every exported error type has its code, its own or its sentinel's; a new
// error type without a row fails here.
func TestEveryErrorTypeHasItsCode(t *testing.T) {
	t.Parallel()
	_, types := publicDecls(t)
	for _, name := range types {
		if _, ok := errorTypeCodes[name]; !ok {
			t.Errorf("%s is an exported error type without a row in errorTypeCodes", name)
		}
	}
	for name, tc := range errorTypeCodes {
		if got := errcode.Code(fmt.Errorf("op: %w", tc.err)); got != tc.code {
			t.Errorf("errcode.Code(%s) = %v, want %v (%v)", name, got, tc.code, tc.err)
		}
	}
}

// reasonFiles are the files that declare the reasons of the probe, the
// qualification, the runner protocol and the hand-over as string constants
// (issue 50: the reasons replaced four exported sub-code types), each with
// the function that maps a reason into errcode's set (nil when that lives
// unexported in its package and the package's own test checks it).
var reasonFiles = map[string]func(string) errcode.ErrorCode{
	"internal/reason/reason.go": reason.Code,
	"internal/qualify/codes.go": qualify.ErrorCode,
	"internal/prpwire/codes.go": func(s string) errcode.ErrorCode { return prpwire.Code(s).ErrorCode() },
	"handover/record.go":        nil,
}

// constStrings returns the string constants declared in the Go file p,
// untyped or of handover's reasonCode (its other constants are no
// reasons).
func constStrings(t *testing.T, p string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); vs.Type != nil && (!ok || id.Name != "reasonCode") {
				continue
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					r, _ := strconv.Unquote(lit.Value)
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// Every reason of the probe, the qualification, the runner protocol and
// the hand-over (parsed from the source) maps into errcode's set (none is
// left unknown, so a new reason without a mapping fails here) and is
// listed in docs/errors.md. The probe's "internal" is the code of an error
// no sentinel classifies, and so unknown.
func TestEveryReasonMaps(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	for file, m := range reasonFiles {
		rs := constStrings(t, file)
		if len(rs) < 8 {
			t.Errorf("%s: found %d reasons; the source walk is broken", file, len(rs))
		}
		for _, r := range rs {
			if !strings.Contains(string(doc), "`"+r+"`") {
				t.Errorf("%s: reason %q is not listed in docs/errors.md", file, r)
			}
			if m == nil {
				continue
			}
			if got := m(r); got == errcode.Unknown && !(file == "internal/reason/reason.go" && r == reason.Internal) {
				t.Errorf("%s: reason %q maps to %v", file, r, got)
			}
		}
		if m != nil && m("no_such_code") != errcode.Unknown {
			t.Errorf("%s: an unknown reason maps to %v, want unknown", file, m("no_such_code"))
		}
	}
}

// Every reason an *errcode.Error literal of the module sets is listed in
// docs/errors.md: reasons are API, and a new one is documented where a
// host looks for them (issue 50).
func TestEveryReasonIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	err = filepath.WalkDir(".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if n := de.Name(); p != "." && (n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Error" || fmt.Sprint(sel.X) != "errcode" {
				return true
			}
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok || fmt.Sprint(kv.Key) != "Reason" {
					continue
				}
				if s, ok := kv.Value.(*ast.BasicLit); ok && s.Kind == token.STRING {
					r, _ := strconv.Unquote(s.Value)
					found++
					if !strings.Contains(string(doc), "`"+r+"`") {
						t.Errorf("%s: reason %q is not listed in docs/errors.md", p, r)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("found %d reasons; the source walk is broken", found)
	}
}
