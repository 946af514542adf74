package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/driverkit"
)

// How the runner is hosted on the berth host itself (drivers.RunnerHost).
//
// Nothing is installed: the runner runs where spec.Binary is, after a
// check that it is a regular executable file whose SHA-256 is spec.SHA256.
// The lease gets one directory of mode 0700 in the host's temporary
// directory, made at the first HostRunner and kept until Release: the
// ingress socket prp.sock (so every ingress of the lease has the same
// path) and the runners' state directories, one per berth lease id.
// Launch marks the runner's environment (driverkit.RunnerMarkEnv, which its tasks
// inherit); Release with Stop or Destroy ends every process with the mark
// (SIGTERM, then SIGKILL) and then removes the directory. Closing the
// ingress stops no runner.

// ingressSocketName is the socket's name in the lease's runner directory.
const ingressSocketName = "prp.sock"

// HostRunner checks spec.Binary (a regular executable file with the sum
// spec.SHA256; an error names the field that does not hold) and opens the
// ingress: a unix socket at a path fixed for the lease, in a directory of
// mode 0700. One ingress at a time per lease.
func (s *sandbox) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: host runner in %s: %w", s.id, err)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("local: host runner in %s: %w", s.id, err)
	}
	if err := checkRunner(spec); err != nil {
		return nil, fmt.Errorf("local: host runner in %s: %w", s.id, err)
	}
	s.runnerMu.Lock()
	defer s.runnerMu.Unlock()
	// Under runnerMu: Release marks the session released before it takes
	// runnerMu to remove the directory, so nothing made here outlives it.
	s.mu.Lock()
	released := s.released
	s.mu.Unlock()
	if released {
		return nil, fmt.Errorf("local: host runner in %s: %w", s.id, drivers.ErrReleased)
	}
	if s.ingress != nil {
		return nil, fmt.Errorf("local: host runner in %s: an ingress is already open", s.id)
	}
	if s.runnerDir == "" {
		dir, err := os.MkdirTemp("", "berth-runner-")
		if err != nil {
			return nil, fmt.Errorf("local: host runner in %s: %w", s.id, err)
		}
		s.runnerDir = dir
	}
	sock := filepath.Join(s.runnerDir, ingressSocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("local: host runner in %s: remove stale socket %s: %w", s.id, sock, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("local: host runner in %s: %w", s.id, err)
	}
	in := &ingress{Listener: ln, s: s, dir: s.runnerDir, sock: sock, binary: spec.Binary}
	s.ingress = in
	return in, nil
}

// checkRunner reports whether spec.Binary is a regular executable file
// whose SHA-256 is spec.SHA256, naming the field that is not.
func checkRunner(spec drivers.RunnerSpec) error {
	f, err := os.Open(spec.Binary)
	if err != nil {
		return fmt.Errorf("runner spec: binary %q: %w", spec.Binary, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("runner spec: binary %q: %w", spec.Binary, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("runner spec: binary %q: %w", spec.Binary, errors.New("not a regular executable file"))
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("runner spec: binary %q: %w", spec.Binary, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != spec.SHA256 {
		return fmt.Errorf("runner spec: sha256 %q: the binary %q has sha256 %s", spec.SHA256, spec.Binary, got)
	}
	return nil
}

// closeRunner closes the lease's ingress; unless keep is set it ends the
// runners the lease launched (endRunners) and removes its runner directory.
// It returns how many runner processes it ended.
func (s *sandbox) closeRunner(ctx context.Context, keep bool) (int, error) {
	s.runnerMu.Lock()
	defer s.runnerMu.Unlock()
	if s.ingress != nil {
		_ = s.ingress.closeLocked()
	}
	if s.runnerDir == "" || keep {
		return 0, nil
	}
	n, err := s.endRunners(ctx, s.runnerDir)
	if err != nil {
		return n, err
	}
	if err := os.RemoveAll(s.runnerDir); err != nil {
		return n, fmt.Errorf("local: release %s: remove the runner directory: %w", s.id, err)
	}
	s.runnerDir = ""
	return n, nil
}

// ingress is the local driver's drivers.RunnerIngress: a unix socket
// listener on the host.
type ingress struct {
	net.Listener
	s      *sandbox
	dir    string
	sock   string
	binary string

	mu      sync.Mutex
	closed  bool
	lastDir string // the state directory of the last Launch
}

var _ drivers.RunnerIngress = (*ingress)(nil)

// Endpoint returns "unix:" and the socket's path.
func (in *ingress) Endpoint() string { return "unix:" + in.sock }

// Close closes the listener, which removes the socket. It stops no
// runner; a second Close does nothing.
func (in *ingress) Close() error {
	in.s.runnerMu.Lock()
	defer in.s.runnerMu.Unlock()
	return in.closeLocked()
}

// closeLocked is Close with the sandbox's runnerMu held.
func (in *ingress) closeLocked() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	in.mu.Unlock()
	err := in.Listener.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed by an http.Server serving it
	}
	_ = os.Remove(in.sock)
	if in.s.ingress == in {
		in.s.ingress = nil
	}
	return err
}

// Launch starts the runner detached (driverkit.LaunchRunnerByExec: its own
// session, output to runner.log) with a state directory in the lease's
// runner directory kept per req.Lease, so that a runner launched again for
// the same lease resumes its session.
func (in *ingress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed {
		return fmt.Errorf("local: launch runner in %s: the ingress is closed", in.s.id)
	}
	h := sha256.Sum256([]byte(req.Lease))
	state := filepath.Join(in.dir, "state-"+hex.EncodeToString(h[:8]))
	in.mu.Lock()
	in.lastDir = state
	in.mu.Unlock()
	env := make(map[string]string, len(req.Env)+1)
	for k, v := range req.Env {
		env[k] = v
	}
	env[driverkit.RunnerMarkEnv] = filepath.Base(in.dir)
	req.Env = env
	return driverkit.LaunchRunnerByExec(ctx, in.s, in.binary, in.Endpoint(), state, req)
}

// LogTail returns the tail of runner.log in the state directory of the
// last Launch (driverkit.RunnerLogTailByExec), nil before any Launch.
func (in *ingress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	in.mu.Lock()
	dir := in.lastDir
	in.mu.Unlock()
	if dir == "" {
		return nil, nil
	}
	b, err := driverkit.RunnerLogTailByExec(ctx, in.s, dir, limit)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return b, nil
}

// hostedProcesses returns the live processes (zombies excluded) whose
// environment carries driverkit.RunnerMarkEnv=Base(dir), and the runners
// whose state directory is in dir, by their argument --state-dir=
// (driverkit.LaunchRunnerByExec): a runner is not dumpable, so unless this
// process is root it cannot read the runner's environment, but it can read
// every command line.
func hostedProcesses(dir string) []int {
	want := []byte(driverkit.RunnerMarkEnv + "=" + filepath.Base(dir) + "\x00")
	arg := []byte("\x00--state-dir=" + dir + "/")
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		marked := err == nil && (bytes.HasPrefix(b, want) || bytes.Contains(b, append([]byte{0}, want...)))
		if !marked {
			c, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil || !bytes.Contains(append([]byte{0}, c...), arg) {
				continue
			}
		}
		if state, _, ok := procStat(e.Name()); ok && state != "Z" && state != "X" {
			out = append(out, pid)
		}
	}
	return out
}

// procStart returns the start time of pid (field 22 of /proc/PID/stat,
// clock ticks since boot) while it runs and is not a zombie; ok is false
// once it is gone, a zombie, or unreadable.
func procStart(pid int) (start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

// endRunners ends the runners the lease launched and everything that
// carries their mark: SIGTERM (a runner stops its tasks and exits), then
// SIGKILL after half the grace period, until none is left or the grace
// period or ctx ends. It returns how many processes it found.
func (s *sandbox) endRunners(ctx context.Context, dir string) (int, error) {
	pids := hostedProcesses(dir)
	n := len(pids)
	if n == 0 {
		return 0, nil
	}
	// A process in its exit has no environment to read any more: the ones
	// found first count until they are gone or zombies (the same process:
	// its start time, so that a reused pid is not waited for).
	starts := map[int]string{}
	for _, pid := range pids {
		if st, ok := procStart(pid); ok {
			starts[pid] = st
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	start := time.Now()
	killed := false
	for {
		left := hostedProcesses(dir)
		exiting := 0
		for pid, st := range starts {
			if now, ok := procStart(pid); ok && now == st && !slices.Contains(left, pid) {
				exiting++
			}
		}
		if len(left) == 0 && exiting == 0 {
			return n, nil
		}
		if !killed && time.Since(start) > s.d.grace/2 {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			killed = true
		}
		if ctx.Err() != nil || time.Since(start) > s.d.grace {
			return n, fmt.Errorf("local: release %s: %d runner processes still running: %w", s.id, len(left)+exiting, drivers.ErrTimeout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond): // polling real processes
		}
	}
}

var _ drivers.ArchReporter = (*driver)(nil)

// RunnerArch implements drivers.ArchReporter: the local host's own
// architecture (runtime.GOARCH of this process), read without I/O.
func (d *driver) RunnerArch(ctx context.Context, cfg config.Config) (string, error) {
	return runtime.GOARCH, nil
}
