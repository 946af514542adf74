package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/berthdev/berth/drivers"
)

// OpenTerminal starts req.Argv (default: sh) in the container with a TTY,
// attached to the returned session, and applies req's window size. Every
// process of the session carries a marker, so that Close ends them all.
func (s *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	s.closePrimed() // a primed exec serves a first command that nothing else preceded (prime.go)
	argv := req.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh"}
	}
	term := req.Term
	if term == "" {
		term = "xterm-256color"
	}
	marker := randomHex(8)
	env := s.execEnv(req.Env)
	env = append(env, "TERM="+term, markerEnv+"="+marker)
	dir := req.Dir
	if dir == "" {
		dir = s.cfg.workdir
	}
	opts := container.ExecOptions{Tty: true, AttachStdin: true, AttachStdout: true, AttachStderr: true, Env: env, WorkingDir: dir, Cmd: argv}
	var size *[2]uint
	if req.Rows > 0 && req.Cols > 0 {
		size = &[2]uint{uint(req.Rows), uint(req.Cols)}
		opts.ConsoleSize = size
	}
	created, err := s.cli.ContainerExecCreate(ctx, s.id, opts)
	if err != nil {
		return nil, engineErr(s.cfg.host, "exec terminal in container "+s.id, err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: true, ConsoleSize: size})
	if err != nil {
		return nil, engineErr(s.cfg.host, "attach terminal in container "+s.id, err)
	}
	t := &terminal{s: s, execID: created.ID, marker: marker, hj: hj, started: time.Now()}
	if size != nil {
		// The console size of exec create needs API 1.42; resize as well.
		if err := t.Resize(ctx, req.Rows, req.Cols); err != nil {
			_ = t.Close()
			return nil, err
		}
	}
	return t, nil
}

// terminal is a TTY exec session.
type terminal struct {
	s       *sandbox
	execID  string
	marker  string
	hj      types.HijackedResponse
	started time.Time

	closeOnce sync.Once
	closeErr  error
}

var _ drivers.TerminalSession = (*terminal)(nil)

// Read returns the terminal's output (stdout and stderr merged by the TTY).
func (t *terminal) Read(p []byte) (int, error) { return t.hj.Reader.Read(p) }

// Write sends keystrokes.
func (t *terminal) Write(p []byte) (int, error) { return t.hj.Conn.Write(p) }

// Resize changes the window size.
func (t *terminal) Resize(ctx context.Context, rows, cols int) error {
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("docker: terminal size %dx%d: want positive rows and columns", rows, cols)
	}
	err := t.s.cli.ContainerExecResize(ctx, t.execID, container.ResizeOptions{Height: uint(rows), Width: uint(cols)})
	return engineErr(t.s.cfg.host, "resize terminal", err)
}

// Wait blocks until the session's process ends and returns its exit status,
// polling the engine with ctx (backing off to 100ms). If ctx ends first it
// returns an error wrapping ctx.Err() and the session stays open.
func (t *terminal) Wait(ctx context.Context) (*drivers.Result, error) {
	delay := 5 * time.Millisecond
	for {
		ins, err := t.s.cli.ContainerExecInspect(ctx, t.execID)
		if err != nil {
			return nil, engineErr(t.s.cfg.host, "inspect terminal exec", err)
		}
		if execEnded(ins) {
			return &drivers.Result{ExitCode: ins.ExitCode, Duration: time.Since(t.started)}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("docker %s: container %s: terminal wait: %w", t.s.cfg.host, t.s.id, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// Close kills every process of the session (verified, as for a cancelled
// Exec) and closes the connection.
func (t *terminal) Close() error {
	t.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := &process{s: t.s, execID: t.execID, marker: t.marker}
		t.closeErr = p.killVerified(ctx)
		t.hj.Close()
	})
	return t.closeErr
}
