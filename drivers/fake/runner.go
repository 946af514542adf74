package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/prp/runner"
)

// HostRunner opens an ingress on a unix socket in a fresh directory of the
// host's temporary directory. The fake's sandboxes live in this process, so
// its runner does too: Launch runs prp/runner in a goroutine (spec.Binary
// is checked to be well-formed, never executed), and the runner's tasks
// are real processes on this host, the only ones the fake starts. The
// runner ends when the sandbox stops or is destroyed. One ingress at a
// time per sandbox.
func (s *sandbox) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	fail := func(err error) (drivers.RunnerIngress, error) {
		return nil, fmt.Errorf("fake: host runner in %s: %w", s.id, err)
	}
	if err := spec.Validate(); err != nil {
		return fail(err)
	}
	alive, _, err := s.begin(ctx, OpRunner)
	if err != nil {
		return nil, err
	}
	s.ingressMu.Lock()
	defer s.ingressMu.Unlock()
	if s.ingress != nil && !s.ingress.closed.Load() {
		return fail(errors.New("an ingress is already open"))
	}
	dir, err := os.MkdirTemp("", "berth-fake-runner-")
	if err != nil {
		return fail(err)
	}
	in := &ingress{s: s, dir: dir, sock: filepath.Join(dir, "prp.sock"), alive: alive}
	if in.Listener, err = net.Listen("unix", in.sock); err != nil {
		os.RemoveAll(dir)
		return fail(err)
	}
	s.ingress = in
	return in, nil
}

// ingress is the fake's drivers.RunnerIngress.
type ingress struct {
	net.Listener
	s         *sandbox
	dir, sock string
	alive     context.Context // the sandbox's life
	closed    atomic.Bool
	log       atomic.Pointer[tailLog] // the last Launch's runner log
}

// Endpoint returns "unix:" and the socket's path.
func (in *ingress) Endpoint() string { return drivers.UnixScheme + in.sock }

// Close closes the listener and removes its directory. Closing it stops
// no runner.
func (in *ingress) Close() error {
	if in.closed.Swap(true) {
		return nil
	}
	return errors.Join(in.Listener.Close(), os.RemoveAll(in.dir))
}

// Launch starts prp/runner in this process with a state directory of its
// own; it runs until the sandbox stops or is destroyed. The ticket is
// handed over in memory. req.Env is added to the environment its tasks
// start from.
func (in *ingress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	fail := func(err error) error { return fmt.Errorf("fake: launch runner in %s: %w", in.s.id, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if in.closed.Load() {
		return fail(errors.New("the ingress is closed"))
	}
	if _, _, err := in.s.begin(ctx, OpRunner); err != nil {
		return err
	}
	if req.Lease == "" || req.Ticket == "" {
		return fail(errors.New("lease and ticket are required"))
	}
	state, err := os.MkdirTemp("", "berth-fake-runner-state-")
	if err != nil {
		return fail(err)
	}
	env := os.Environ()
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	log := &tailLog{}
	in.log.Store(log)
	r, err := runner.New(in.Endpoint(), state, &runner.Options{Lease: req.Lease, Ticket: req.Ticket, BaseEnv: env,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		os.RemoveAll(state)
		fmt.Fprintln(log, "berth-runner:", err)
		return fail(err)
	}
	go func() {
		defer os.RemoveAll(state)
		// As examples/runner does: the error that ended the runner is
		// its log's last line.
		if err := r.Run(in.alive); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(log, "berth-runner:", err)
		}
	}()
	return nil
}

// LogTail returns the last limit bytes of what the last Launch's in-process
// runner logged (its slog text at info level and the error it ended with,
// as examples/runner writes them; the fake keeps the last
// drivers.MaxRunnerLogTail bytes in memory), nil before any Launch.
func (in *ingress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: runner log of %s: %w", in.s.id, err)
	}
	l := in.log.Load()
	if l == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) == 0 {
		return nil, nil
	}
	return bytes.Clone(l.buf[max(0, len(l.buf)-driverkit.ClampLogTail(limit)):]), nil
}

// tailLog is an io.Writer that keeps the last drivers.MaxRunnerLogTail
// bytes written to it.
type tailLog struct {
	mu  sync.Mutex
	buf []byte
}

func (l *tailLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - drivers.MaxRunnerLogTail; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// RunnerArch implements drivers.ArchReporter: the fake's runner runs in
// this process, so its sandboxes have this host's architecture
// (runtime.GOARCH).
func (d *Driver) RunnerArch(ctx context.Context, cfg drivers.Config) (string, error) {
	return runtime.GOARCH, nil
}
