package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/berthdev/berth/drivers"
)

// How the runner is hosted on the berth host itself (drivers.RunnerHost).
//
// Nothing is installed: the runner runs where spec.Binary is, after a
// check that it is a regular executable file whose SHA-256 is spec.SHA256.
// The lease gets one directory of mode 0700 in the host's temporary
// directory, made at the first HostRunner and kept until Release: the
// ingress socket prp.sock (so every ingress of the lease has the same
// path) and the runners' state directories, one per berth lease id.
// Release removes the directory; runners are detached and keep running.

// unixScheme is prp/runner.UnixScheme (a test keeps them equal); the driver
// does not import the runner.
const unixScheme = "unix:"

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

// closeRunner closes the lease's ingress and removes its runner directory.
func (s *sandbox) closeRunner() error {
	s.runnerMu.Lock()
	in, dir := s.ingress, s.runnerDir
	s.runnerDir = ""
	s.runnerMu.Unlock()
	if in != nil {
		_ = in.Close()
	}
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("local: release %s: remove the runner directory: %w", s.id, err)
	}
	return nil
}

// ingress is the local driver's drivers.RunnerIngress: a unix socket
// listener on the host.
type ingress struct {
	net.Listener
	s      *sandbox
	dir    string
	sock   string
	binary string

	mu     sync.Mutex
	closed bool
}

var _ drivers.RunnerIngress = (*ingress)(nil)

// Endpoint returns "unix:" and the socket's path.
func (in *ingress) Endpoint() string { return unixScheme + in.sock }

// Close closes the listener, which removes the socket. It stops no
// runner; a second Close does nothing.
func (in *ingress) Close() error {
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
	in.s.runnerMu.Lock()
	if in.s.ingress == in {
		in.s.ingress = nil
	}
	in.s.runnerMu.Unlock()
	return err
}

// Launch starts the runner detached (drivers.LaunchRunnerByExec: its own
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
	return drivers.LaunchRunnerByExec(ctx, in.s, in.binary, in.Endpoint(), state, req)
}
