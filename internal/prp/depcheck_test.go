package prp

import (
	"os/exec"
	"strings"
	"testing"
)

// floorZero reports whether package p may be imported by a floor-0 package
// of berth (DESIGN.md: the standard library, golang.org/x, coder/websocket
// and berth's qualification, images, errcode and internal/prpkeys).
func floorZero(p string) bool {
	switch {
	case !strings.Contains(strings.SplitN(p, "/", 2)[0], "."):
		return true // the standard library
	case strings.HasPrefix(p, "golang.org/x/"), strings.HasPrefix(p, "github.com/coder/websocket"):
		return true
	case p == "github.com/berthdev/berth/qualification", p == "github.com/berthdev/berth/images", p == "github.com/berthdev/berth/errcode":
		return true
	case p == "github.com/berthdev/berth/internal/prp" || strings.HasPrefix(p, "github.com/berthdev/berth/internal/prp/"):
		return true
	case p == "github.com/berthdev/berth/internal/prpkeys":
		return true // the Signer's keys, for internal/prpwire
	}
	return false
}

// The prp packages stay on floor 0: their direct imports are the standard
// library, golang.org/x, coder/websocket, qualification, images, errcode and prp.
func TestFloorZero(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "github.com/berthdev/berth/internal/prp/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("go list found %d packages, want prp and its subpackages: %q", len(lines), out)
	}
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, ":")
		if strings.HasPrefix(pkg, "github.com/berthdev/berth/internal/prp/prptest") {
			continue // test support may import testing helpers
		}
		for _, p := range strings.Fields(imports) {
			if !floorZero(p) {
				t.Errorf("%s imports %s, above floor 0", pkg, p)
			}
		}
	}
}
