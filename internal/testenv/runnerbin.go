package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

var runnerBin struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  string
}

// RunnerBinary builds the reference runner (cmd/berth-runner) once per test
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
		cmd := exec.Command("go", "build", "-o", b.path, "github.com/berthdev/berth/cmd/berth-runner")
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

// StartRunner starts the reference runner (RunnerBinary) with args and the
// process environment plus env. At the test's cleanup it is stopped with
// SIGTERM if it still runs, and its log is printed if the test failed.
func StartRunner(t testing.TB, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(RunnerBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var logs Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("runner pid %d log:\n%s", cmd.Process.Pid, logs.String())
		}
	})
	return cmd
}

// RunnerBinarySum returns RunnerBinary's path and the lowercase hex SHA-256
// of its contents (a drivers.RunnerSpec).
func RunnerBinarySum(t testing.TB) (path, sum string) {
	t.Helper()
	path = RunnerBinary(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("testenv: read the runner: %v", err)
	}
	h := sha256.Sum256(b)
	return path, hex.EncodeToString(h[:])
}
