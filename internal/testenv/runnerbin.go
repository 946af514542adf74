package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var runnerBin struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  string
}

// RunnerBinary builds the reference runner (examples/runner) once per test
// binary, static (CGO_ENABLED=0), and returns its path. A package that uses
// it calls RemoveRunnerBinary from its TestMain after m.Run.
func RunnerBinary(t testing.TB) string {
	t.Helper()
	b := &runnerBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "berth-runner-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "berth-runner")
		cmd := exec.Command("go", "build", "-o", b.path, "github.com/berthdev/berth/examples/runner")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err, b.out = err, string(out)
		}
	})
	if b.err != nil {
		t.Fatalf("testenv: build the runner: %v\n%s", b.err, b.out)
	}
	return b.path
}

// RemoveRunnerBinary removes what RunnerBinary built, if anything.
func RemoveRunnerBinary() {
	if runnerBin.dir != "" {
		os.RemoveAll(runnerBin.dir)
	}
}
