package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// command builds the process for c: its own process group, killed as a
// whole (SIGKILL to -pgid) when ctx ends, with WaitDelay so that pipes held
// by grandchildren cannot hang Wait.
func (s *sandbox) command(ctx context.Context, c drivers.Command) *exec.Cmd {
	argv := slices.Clone(c.Argv)
	if argv[0] == "sh" {
		argv[0] = s.shell
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = s.dir
	if c.Dir != "" {
		cmd.Dir = c.Dir
		if !filepath.IsAbs(c.Dir) {
			cmd.Dir = filepath.Join(s.dir, c.Dir)
		}
	}
	cmd.Env = os.Environ()
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		cmd.Env = append(cmd.Env, k+"="+c.Env[k])
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = s.d.waitDelay
	return cmd
}

// start starts cmd and records its process group in the session. A command
// that cannot be found or executed gives a Result (127 or 126) instead.
func (s *sandbox) start(cmd *exec.Cmd) (*drivers.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil, fmt.Errorf("local: exec in %s: %w", s.id, drivers.ErrReleased)
	}
	if err := cmd.Start(); err != nil {
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
			return &drivers.Result{ExitCode: 127, Stderr: fmt.Appendf(nil, "%s: not found\n", cmd.Args[0])}, nil
		case errors.Is(err, fs.ErrPermission):
			return &drivers.Result{ExitCode: 126, Stderr: fmt.Appendf(nil, "%s: permission denied\n", cmd.Args[0])}, nil
		}
		return nil, fmt.Errorf("local: start %q in %s: %w", cmd.Args[0], s.id, err)
	}
	s.groups[cmd.Process.Pid] = true
	return nil, nil
}

// finish turns the end of cmd into a Result, or an error wrapping ctx.Err()
// when ctx ended the process.
func (s *sandbox) finish(ctx context.Context, cmd *exec.Cmd, waitErr error, began time.Time) (*drivers.Result, error) {
	pgid := cmd.Process.Pid
	if syscall.Kill(-pgid, 0) == syscall.ESRCH {
		s.mu.Lock()
		delete(s.groups, pgid)
		s.mu.Unlock()
	}
	res := &drivers.Result{Duration: time.Since(began)}
	ps := cmd.ProcessState
	if ps == nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("local: %q in %s: %w", cmd.Args[0], s.id, ctx.Err())
		}
		return nil, fmt.Errorf("local: %q in %s: %w", cmd.Args[0], s.id, waitErr)
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("local: %q in %s: %w", cmd.Args[0], s.id, ctx.Err())
		}
		res.ExitCode, res.Signal = -1, signalName(ws.Signal())
		return res, nil
	}
	res.ExitCode = ps.ExitCode()
	return res, nil
}

var sigNames = map[syscall.Signal]string{
	syscall.SIGKILL: "KILL", syscall.SIGTERM: "TERM", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP",
	syscall.SIGQUIT: "QUIT", syscall.SIGABRT: "ABRT", syscall.SIGSEGV: "SEGV", syscall.SIGPIPE: "PIPE",
	syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2",
}

// sigByName maps every name of driverkit.Signals to its signal.
var sigByName = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM,
}

func signalName(sig syscall.Signal) string {
	if n, ok := sigNames[sig]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

// Exec runs cmd on the host in its own process group, in cmd.Dir (relative
// to the session's directory) or the session's directory, with the host's
// environment plus cmd.Env. An Argv[0] of "sh" runs the configured shell. A
// program that is not found exits 127. On cancellation the whole process
// group is killed and Exec returns an error wrapping ctx.Err(). Background
// processes the command leaves running belong to the session and are ended
// by Release.
func (s *sandbox) Exec(ctx context.Context, c drivers.Command) (*drivers.Result, error) {
	if len(c.Argv) == 0 {
		return nil, fmt.Errorf("local: exec in %s: empty argv", s.id)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: exec %q in %s: %w", c.Argv[0], s.id, err)
	}
	cmd := s.command(ctx, c)
	stdout, stderr := driverkit.NewOutputBuffer(c.Limit()), driverkit.NewOutputBuffer(c.Limit())
	cmd.Stdout, cmd.Stderr = stdout, stderr
	var stdin io.WriteCloser
	if c.Stdin != nil {
		w, err := cmd.StdinPipe()
		if err != nil {
			return nil, fmt.Errorf("local: exec %q in %s: %w", c.Argv[0], s.id, err)
		}
		stdin = w
	}
	began := time.Now()
	if res, err := s.start(cmd); res != nil || err != nil {
		return res, err
	}
	ended := make(chan struct{})
	if stdin != nil {
		driverkit.CopyStdin(stdin, c.Stdin, ended)
	}
	waitErr := cmd.Wait()
	close(ended)
	res, err := s.finish(ctx, cmd, waitErr, began)
	if err != nil {
		return nil, err
	}
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.Truncated = stdout.Truncated() || stderr.Truncated()
	return res, nil
}

// process is a command started by Start.
type process struct {
	s     *sandbox
	cmd   *exec.Cmd
	stdin io.WriteCloser
	began time.Time
	res   *drivers.Result
	err   error
	done  chan struct{}
}

// Start runs c like Exec, streaming stdout and stderr (nil discards) to
// the writers as the process writes them.
func (s *sandbox) Start(ctx context.Context, c drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	if len(c.Argv) == 0 {
		return nil, fmt.Errorf("local: start in %s: empty argv", s.id)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: start %q in %s: %w", c.Argv[0], s.id, err)
	}
	cmd := s.command(ctx, c)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	p := &process{s: s, cmd: cmd, began: time.Now(), done: make(chan struct{})}
	if c.Stdin != nil {
		w, err := cmd.StdinPipe()
		if err != nil {
			return nil, fmt.Errorf("local: start %q in %s: %w", c.Argv[0], s.id, err)
		}
		p.stdin = w
	}
	if res, err := s.start(cmd); err != nil {
		return nil, err
	} else if res != nil {
		return nil, fmt.Errorf("local: start %q in %s: %s", c.Argv[0], s.id, res.Stderr)
	}
	ended := make(chan struct{})
	if p.stdin != nil {
		driverkit.CopyStdin(p.stdin, c.Stdin, ended)
	}
	go func() {
		defer close(p.done)
		waitErr := cmd.Wait()
		close(ended)
		p.res, p.err = s.finish(ctx, cmd, waitErr, p.began)
	}()
	return p, nil
}

// Wait blocks until the process ends and its output has been written, or
// until ctx ends (then it returns an error wrapping ctx.Err() and the
// process keeps running).
func (p *process) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, p.done); err != nil {
		return nil, fmt.Errorf("local: wait for %q in %s: %w", p.cmd.Args[0], p.s.id, err)
	}
	return p.res, p.err
}

// Signal sends sig, one of driverkit.Signals (as driverkit.ParseSignal reads
// it), to the process group; another name is an error wrapping
// drivers.ErrUnsupported.
func (p *process) Signal(ctx context.Context, sig string) error {
	name, err := driverkit.ParseSignal(sig)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	s := sigByName[name]
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, s); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("local: signal %s to group %d: %w", sig, p.cmd.Process.Pid, err)
	}
	return ctx.Err()
}

// CloseStdin closes the process's standard input (nothing to do when the
// command had none).
func (p *process) CloseStdin() error {
	if p.stdin == nil {
		return nil
	}
	if err := p.stdin.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
