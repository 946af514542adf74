package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

var runnerBin struct {
	once sync.Once
	dir  string // a temporary directory to remove, when not the shared one
	path string
	err  error
	out  string
}

// RunnerBinary builds the reference runner (cmd/berth-runner), static
// (CGO_ENABLED=0), and returns its path. The test binaries of a module
// share one build: `go build -o` into a directory of the user's cache
// named for the module's directory and the Go version, under a lock file
// there, so that concurrent test binaries build it one at a time and each
// after the first finds it up to date (go build leaves a target whose build
// ID matches its sources untouched, and relinks it when they changed). It
// is built once per test binary at most; without a user cache directory it
// goes to a temporary directory, which RemoveRunnerBinary removes (call it
// from TestMain after m.Run).
func RunnerBinary(t testing.TB) string {
	t.Helper()
	b := &runnerBin
	b.once.Do(func() {
		dir, unlock, err := runnerCacheDir()
		if err != nil {
			if b.dir, b.err = os.MkdirTemp("", "berth-runner-bin-"); b.err != nil {
				return
			}
			dir, unlock = b.dir, func() {}
		}
		defer unlock()
		b.path = filepath.Join(dir, "berth-runner")
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

// runnerCacheDir returns the shared directory of the runner's build, locked
// until unlock is called.
func runnerCacheDir() (dir string, unlock func(), err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", nil, err
	}
	root, err := moduleRoot()
	if err != nil {
		return "", nil, err
	}
	h := sha256.Sum256([]byte(root + "\x00" + runtime.Version()))
	dir = filepath.Join(cache, "berth-test", "runner-"+hex.EncodeToString(h[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return "", nil, err
	}
	return dir, func() { f.Close() }, nil
}

// moduleRoot returns the directory of the go.mod above the working
// directory (a test binary runs in its package's directory).
func moduleRoot() (string, error) {
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

// RemoveRunnerBinary removes what RunnerBinary built in a temporary
// directory, if anything (the shared build stays, as a cache).
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
