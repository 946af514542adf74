package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// GoBuild builds the main package pkg into bin with the go command, as a
// test's helper binary (a plugin, a simulator). A test binary built with
// -race builds it with -race too: the packages it shares with the test
// (a driver, gRPC, the Docker client) then come from the build cache the
// test's own compile filled, and only the link is new, where a plain
// build compiled the whole tree a second time (make test, cold: the
// plugin tests' builds were most of their package's two minutes).
//
// The build is shared (SharedBuild): the test binaries of a go test run
// that need pkg link it once, and bin is a hard link to (or, across file
// systems, a copy of) the shared binary, so that what a test writes beside
// bin (a plugin's manifest) stays its own.
func GoBuild(bin, pkg string) ([]byte, error) {
	built, out, err := SharedBuild(context.Background(), pkg, nil, goBuildFlags()...)
	if err != nil {
		return out, err
	}
	if err := linkOrCopy(built, bin); err != nil {
		return nil, err
	}
	return nil, nil
}

// goBuildFlags are the flags GoBuild builds with: -race when this test
// binary has it.
func goBuildFlags() []string {
	if raceEnabled {
		return []string{"-race"}
	}
	return nil
}

// shared holds this process's shared builds by key: each is run once per
// test binary at most.
var shared struct {
	mu     sync.Mutex
	builds map[string]*sharedBin
	temps  []string // temporary directories to remove (RemoveRunnerBinary)
}

type sharedBin struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// SharedBuild builds the main package pkg (an import path) with `go build`,
// flags (such as -race) and env (such as CGO_ENABLED=0) added to the
// process's, and returns the binary's path and, when the build failed,
// the go command's output. The binary lives in a directory of the user's
// cache named for the build's configuration (the module's directory, the
// Go version, pkg, flags, env and the go command's variables of the
// environment), shared by the test binaries of a run and by later runs:
// they build one at a time under a lock file there, and `go build -o`
// leaves a binary whose build ID matches its inputs (every source file,
// flag and the toolchain, as go build's own cache keys them) untouched
// and relinks one that does not, so a stale binary is never used and an
// up-to-date one costs the go command's check only (about a second).
// Within a test binary it runs once per configuration. Without a user
// cache directory it builds into a temporary directory, which
// RemoveRunnerBinary removes. Nothing else may write to the returned
// path; a test that writes beside the binary links it into its own
// directory (GoBuild).
func SharedBuild(ctx context.Context, pkg string, env []string, flags ...string) (string, []byte, error) {
	key := buildKey(pkg, env, flags)
	shared.mu.Lock()
	if shared.builds == nil {
		shared.builds = map[string]*sharedBin{}
	}
	b := shared.builds[key]
	if b == nil {
		b = &sharedBin{}
		shared.builds[key] = b
	}
	shared.mu.Unlock()
	b.once.Do(func() {
		dir, unlock, err := lockedCacheDir("bin-" + key)
		if err != nil {
			if dir, err = os.MkdirTemp("", "berth-test-bin-"); err != nil {
				b.err = err
				return
			}
			shared.mu.Lock()
			shared.temps = append(shared.temps, dir)
			shared.mu.Unlock()
			unlock = func() {}
		}
		defer unlock()
		b.path = filepath.Join(dir, path.Base(pkg))
		cmd := exec.CommandContext(ctx, "go", append(append([]string{"build", "-o", b.path}, flags...), pkg)...)
		cmd.Dir, _ = moduleRoot()
		cmd.Env = append(os.Environ(), env...)
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		return "", b.out, b.err
	}
	return b.path, nil, nil
}

// buildKey names a shared build's configuration. It keeps builds that
// differ apart (so that they do not relink one binary in turns, nor under
// a test that runs it); whether a binary is up to date is go build's to
// say.
func buildKey(pkg string, env, flags []string) string {
	root, _ := moduleRoot()
	parts := []string{root, runtime.Version(), pkg, strings.Join(flags, " "), strings.Join(env, " ")}
	for _, v := range []string{"GOTOOLCHAIN", "GOFLAGS", "GOOS", "GOARCH", "GOAMD64", "GOEXPERIMENT", "CGO_ENABLED"} {
		parts = append(parts, v+"="+os.Getenv(v))
	}
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:8])
}

// lockedCacheDir returns the directory name of berth's tests in the
// user's cache, created, and locked until unlock is called: another
// process that locks it waits.
func lockedCacheDir(name string) (dir string, unlock func(), err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", nil, err
	}
	dir = filepath.Join(cache, "berth-test", name)
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

// linkOrCopy makes dst a hard link to src, or a copy of it (executable)
// where a link cannot be made.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	} else if errors.Is(err, os.ErrExist) {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
