package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// RunnerBinary builds the reference runner (cmd/berth-runner), static
// (CGO_ENABLED=0), and returns its path: a SharedBuild, so the test
// binaries of a run share one build. Without a user cache directory it
// goes to a temporary directory, which RemoveRunnerBinary removes (call it
// from TestMain after m.Run).
func RunnerBinary(t testing.TB) string {
	t.Helper()
	path, out, err := SharedBuild(context.Background(), "github.com/berthdev/berth/cmd/berth-runner", []string{"CGO_ENABLED=0"})
	if err != nil {
		t.Fatalf("testenv: build the runner: %v\n%s", err, out)
	}
	return path
}

// moduleRoot returns the directory of berth's module, from this file's
// source path (so that a shared build works from any directory, as envctl
// bench runs), or else the go.mod above the working directory (a test
// binary runs in its package's directory).
func moduleRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// RemoveRunnerBinary removes what RunnerBinary and SharedBuild built in a
// temporary directory, if anything (the shared builds stay, as a cache).
func RemoveRunnerBinary() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, d := range shared.temps {
		os.RemoveAll(d)
	}
	shared.temps = nil
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
