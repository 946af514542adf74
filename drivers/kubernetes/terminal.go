package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/tools/remotecommand"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// ttyWrapperScript is wrapperScript for a TTY: the terminal would echo
// the environment lines, so it turns echo off first (stty; the image needs
// it when there is an environment to send), says it is ready (the driver
// sends nothing before), reads them and turns echo back on.
const ttyWrapperScript = `d=$1; e=$2; shift 2
if [ "$e" = 1 ]; then
stty -echo || exit 125
printf 'berth-tty-ready\n'
while IFS= read -r l && [ -n "$l" ]; do v=$(printf '%bx' "${l#*=}"); export "${l%%=*}=${v%x}"; done
stty echo
fi
cd -- "$d" || exit 126
exec "$@"`

// ttyReady is the line ttyWrapperScript prints when it reads, as the
// terminal renders it.
const ttyReady = "berth-tty-ready\r\n"

// OpenTerminal starts req.Argv (default: sh) in the pod with a TTY,
// through the API server's exec, attached to the returned session, at
// req's window size. Every process of the session carries a marker, so
// that Close ends them all.
func (s *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	argv := req.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh"}
	}
	term := req.Term
	if term == "" {
		term = "xterm-256color"
	}
	env := s.execEnv(req.Env)
	var preamble []byte
	hasEnv := "0"
	if len(env) > 0 {
		var err error
		if preamble, err = envPreamble(env); err != nil {
			return nil, err
		}
		hasEnv = "1"
	}
	dir := req.Dir
	if dir == "" {
		dir = s.cfg.workdir
	}
	marker := randomHex(8)
	full := append([]string{"env", markerEnv + "=" + marker, "TERM=" + term, "sh", "-c", ttyWrapperScript, "berth-tty", dir, hasEnv}, argv...)
	ex, err := s.executor(full, true, true)
	if err != nil {
		return nil, fmt.Errorf("%s: terminal: %w", s.target(), err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	t := &terminal{s: s, marker: marker, in: inW, out: outR, started: time.Now(),
		sizes: make(chan remotecommand.TerminalSize, 4), done: make(chan struct{})}
	rows, cols := req.Rows, req.Cols
	if rows <= 0 || cols <= 0 {
		rows, cols = 24, 80
	}
	t.sizes <- remotecommand.TerminalSize{Height: uint16(rows), Width: uint16(cols)}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.cancel = cancel
	go func() {
		t.err = ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Tty: true, TerminalSizeQueue: t})
		outW.CloseWithError(io.EOF)
		close(t.done)
	}()
	if preamble != nil {
		if err := t.handshake(ctx, preamble); err != nil {
			_ = t.Close()
			return nil, err
		}
	}
	return t, nil
}

// handshake waits for ttyReady, then sends the environment.
func (t *terminal) handshake(ctx context.Context, preamble []byte) error {
	got := make(chan error, 1)
	br := bufio.NewReader(t.out)
	go func() {
		var seen []byte
		for !bytes.HasSuffix(seen, []byte(ttyReady)) {
			b, err := br.ReadByte()
			if err != nil {
				got <- fmt.Errorf("%s: terminal ended before it was ready: %w", t.s.target(), err)
				return
			}
			seen = append(seen, b)
			if len(seen) > 4096 {
				got <- fmt.Errorf("%s: terminal: no ready line (the image needs sh and stty): %q", t.s.target(), seen[:200])
				return
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return fmt.Errorf("%s: terminal: %w", t.s.target(), ctx.Err())
	}
	t.reader = br
	_, err := t.in.Write(preamble)
	return err
}

// terminal is a TTY exec session.
type terminal struct {
	s       *sandbox
	marker  string
	in      *io.PipeWriter
	out     *io.PipeReader
	reader  io.Reader // out, or the handshake's buffered reader of it
	started time.Time
	cancel  context.CancelFunc

	sizes chan remotecommand.TerminalSize

	done chan struct{} // the stream ended; err is set
	err  error

	closed closeOnce
}

var _ drivers.TerminalSession = (*terminal)(nil)

// Next implements remotecommand.TerminalSizeQueue: the next window size,
// nil once the session ended.
func (t *terminal) Next() *remotecommand.TerminalSize {
	select {
	case sz, ok := <-t.sizes:
		if !ok {
			return nil
		}
		return &sz
	case <-t.done:
		return nil
	}
}

// Read returns the terminal's output (stdout and stderr merged by the TTY).
func (t *terminal) Read(p []byte) (int, error) {
	if t.reader != nil {
		return t.reader.Read(p)
	}
	return t.out.Read(p)
}

// Write sends keystrokes.
func (t *terminal) Write(p []byte) (int, error) { return t.in.Write(p) }

// Resize changes the window size.
func (t *terminal) Resize(ctx context.Context, rows, cols int) error {
	if rows <= 0 || cols <= 0 || rows > 65535 || cols > 65535 {
		return fmt.Errorf("kubernetes: terminal size %dx%d: want positive rows and columns", rows, cols)
	}
	select {
	case t.sizes <- remotecommand.TerminalSize{Height: uint16(rows), Width: uint16(cols)}:
		return nil
	case <-t.done:
		return fmt.Errorf("%s: resize: the terminal has ended", t.s.target())
	case <-ctx.Done():
		return fmt.Errorf("%s: resize: %w", t.s.target(), ctx.Err())
	}
}

// Wait blocks until the session's process ends and returns its exit
// status. If ctx ends first it returns an error wrapping ctx.Err() and the
// session stays open.
func (t *terminal) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, t.done); err != nil {
		return nil, fmt.Errorf("%s: terminal wait: %w", t.s.target(), err)
	}
	p := &process{s: t.s, streamErr: t.err, started: t.started}
	return p.exited()
}

// Close kills every process of the session (verified, as for a cancelled
// Exec) and ends the stream.
func (t *terminal) Close() error {
	return t.closed.do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := &process{s: t.s, marker: t.marker, done: t.done}
		var err error
		select {
		case <-t.done:
		default:
			err = p.killVerified(ctx)
		}
		t.cancel()
		// client-go's copy of the input reads an end, not an error
		// (which it would log); a Write still waiting returns
		// io.ErrClosedPipe.
		t.in.Close()
		<-t.done
		return err
	})
}
