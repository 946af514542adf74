package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A shared build is built once per test binary and configuration: the
// same path again, a runnable binary; another configuration is another
// binary; GoBuild's copy is the test's own (what it writes beside it
// stays out of the shared directory); a package that does not build
// fails with the go command's output.
func TestSharedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program of the module")
	}
	const pkg = "github.com/berthdev/berth/internal/cmd/testreport"
	ctx := context.Background()
	first, out, err := SharedBuild(ctx, pkg, nil)
	if err != nil {
		t.Fatalf("SharedBuild: %v\n%s", err, out)
	}
	again, _, err := SharedBuild(ctx, pkg, nil)
	if err != nil || again != first {
		t.Errorf("SharedBuild again: %q, %v; want %q", again, err, first)
	}
	static, out, err := SharedBuild(ctx, pkg, []string{"CGO_ENABLED=0"})
	if err != nil {
		t.Fatalf("SharedBuild with CGO_ENABLED=0: %v\n%s", err, out)
	}
	if filepath.Dir(static) == filepath.Dir(first) {
		t.Errorf("two configurations share the directory %s", filepath.Dir(first))
	}
	// testreport with an unknown flag of its own says how it is used.
	if out, _ := exec.Command(first, "-no-such-flag").CombinedOutput(); !strings.Contains(string(out), "slowest") {
		t.Errorf("the shared binary %s does not run as testreport: %s", first, out)
	}

	bin := filepath.Join(t.TempDir(), "testreport")
	if out, err := GoBuild(bin, pkg); err != nil {
		t.Fatalf("GoBuild: %v\n%s", err, out)
	}
	if err := os.WriteFile(bin+".manifest", []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	shared, _, _ := SharedBuild(ctx, pkg, nil, goBuildFlags()...)
	if _, err := os.Stat(shared + ".manifest"); !os.IsNotExist(err) {
		t.Errorf("a file written beside GoBuild's binary is beside the shared one too (%v)", err)
	}
	if a, err := os.Stat(bin); err != nil || a.Mode()&0o111 == 0 {
		t.Errorf("GoBuild's binary: %v, %v; want an executable", a, err)
	}

	if _, out, err := SharedBuild(ctx, "github.com/berthdev/berth/internal/no-such-package", nil); err == nil || len(out) == 0 {
		t.Errorf("SharedBuild of a missing package: %v, output %q; want an error and the go command's words", err, out)
	}
}
