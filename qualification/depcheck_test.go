package qualification

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	thisPkg    = "github.com/berthdev/berth/qualification"
	qualifyPkg = "github.com/berthdev/berth/internal/qualify"
	imagesPkg  = "github.com/berthdev/berth/images"
	// errcodePkg is the error-code vocabulary: standard library only, no I/O.
	errcodePkg = "github.com/berthdev/berth/errcode"
)

// forbidden are packages that do I/O a pure package must not do.
var forbidden = []string{
	"net", "net/http", "net/rpc", "os", "os/exec", "os/signal", "io/ioutil", "syscall",
	"database/sql", "database/sql/driver", "log", "log/slog",
}

// The qualification package, and internal/qualify with the evaluation,
// fingerprint and detection logic over its values, stay pure: no I/O and
// no berth package other than images, errcode (and qualification)
// (go-containerregistry depcheck style). images' own dependency
// go-containerregistry/pkg/name pulls in net and os for host parsing;
// those are allowed only through images, never imported here directly.
func TestPurity(t *testing.T) {
	t.Parallel()
	viaImages := goList(t, "-deps", imagesPkg)
	for _, pkg := range []string{thisPkg, qualifyPkg} {
		direct := goList(t, "-f", `{{join .Imports "\n"}}`, pkg)
		deps := goList(t, "-deps", pkg)
		for _, p := range direct {
			if slices.Contains(forbidden, p) {
				t.Errorf("%s imports %s directly; it must do no I/O", pkg, p)
			}
		}
		for _, p := range deps {
			if strings.HasPrefix(p, "github.com/berthdev/berth/") && p != pkg && p != thisPkg && p != imagesPkg && p != errcodePkg {
				t.Errorf("%s depends on %s; only qualification, images and errcode are allowed", pkg, p)
			}
			if slices.Contains(forbidden, p) && !slices.Contains(viaImages, p) {
				t.Errorf("%s depends on %s (not through images); it must do no I/O", pkg, p)
			}
		}
		if !slices.Contains(deps, imagesPkg) {
			t.Errorf("go list -deps %s does not list %s; the check is not looking at the right graph: %v", pkg, imagesPkg, deps)
		}
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH: %v", err)
	}
	cmd := exec.Command(goTool, append([]string{"list"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, msg)
	}
	return strings.Fields(string(out))
}
