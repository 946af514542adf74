package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/berthdev/berth/drivers"
)

// OpenTerminal starts req.Argv (default: the login user's shell as a login
// shell) on a pseudo-terminal of req.Rows x req.Cols (default 24x80) with
// TERM req.Term (default "xterm-256color"), in req.Dir (default Cwd) with
// req.Env exported. Reading returns the terminal's output, writing sends
// keystrokes. Close kills the session's processes on the server and waits
// for the session to end. ctx bounds opening only.
func (sb *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	pr := &ptyRequest{term: req.Term, rows: req.Rows, cols: req.Cols}
	if pr.term == "" {
		pr.term = "xterm-256color"
	}
	if pr.rows <= 0 {
		pr.rows = 24
	}
	if pr.cols <= 0 {
		pr.cols = 80
	}
	dir := sb.cwd
	if req.Dir != "" {
		if strings.HasPrefix(req.Dir, "/") {
			dir = req.Dir
		} else {
			dir = strings.TrimSuffix(sb.cwd, "/") + "/" + req.Dir
		}
	}
	tag := sb.nextTag()
	script, err := execScript(dir, req.Env, req.Argv, true, tag, "")
	if err != nil {
		return nil, err
	}
	script = sb.c.command(script)
	r, w := io.Pipe()
	stdin, stdinW := io.Pipe()
	p, err := sb.start(ctx, script, drivers.Command{Stdin: stdin}, w, nil, startOpts{pty: pr, tag: tag})
	if err != nil {
		return nil, err
	}
	go func() {
		<-p.done
		_ = w.Close()
		_ = stdinW.Close()
	}()
	return &terminal{p: p, r: r, w: stdinW}, nil
}

type terminal struct {
	p         *process
	r         *io.PipeReader
	w         *io.PipeWriter
	closeOnce sync.Once
	closeErr  error
}

var _ drivers.TerminalSession = (*terminal)(nil)

// Read returns terminal output; io.EOF after the session ended.
func (t *terminal) Read(b []byte) (int, error) { return t.r.Read(b) }

// Write sends keystrokes.
func (t *terminal) Write(b []byte) (int, error) { return t.w.Write(b) }

// Resize changes the window size.
func (t *terminal) Resize(ctx context.Context, rows, cols int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := t.p.sess.WindowChange(rows, cols); err != nil {
		return fmt.Errorf("ssh %s: window change: %w", t.p.sb.id, err)
	}
	return nil
}

// Wait blocks until the session's process ended and returns its status. If
// ctx ends first it returns an error wrapping ctx.Err() and the session
// stays open.
func (t *terminal) Wait(ctx context.Context) (*drivers.Result, error) { return t.p.Wait(ctx) }

// Close kills the session's processes on the server and waits until the
// session ended.
func (t *terminal) Close() error {
	t.closeOnce.Do(func() {
		if !t.p.finished() {
			ctx, cancel := context.WithTimeout(context.Background(), killGrace)
			defer cancel()
			if g := t.p.waitGroup(ctx); g > 0 && !t.p.finished() {
				if _, _, err := t.p.sb.c.control(ctx, killScript("KILL", []int{g}, tagPattern(t.p.tag, false), false)); err != nil {
					t.closeErr = err
				}
			}
			select {
			case <-t.p.done:
			case <-ctx.Done():
				_ = t.p.sess.Close()
				t.closeErr = errors.Join(t.closeErr, fmt.Errorf("ssh %s: terminal session was not seen to end; its processes may still run", t.p.sb.id))
			}
		}
		_ = t.w.Close()
		_ = t.r.Close()
	})
	return t.closeErr
}
