package fake

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"

	"github.com/berthdev/berth/drivers"
)

// Prompt is what the fake terminal prints when it waits for a line.
const Prompt = "$ "

// termSession is the fake's terminal: an echo shell (see OpenTerminal).
type termSession struct {
	*process
	mu     sync.Mutex
	cond   *sync.Cond
	out    bytes.Buffer
	closed bool
}

// OpenTerminal opens an echo shell: input is echoed as a terminal with echo
// on would ("\r" and "\n" as "\r\n"); each complete line runs as
// sh -c LINE (one command, see Exec), its output translated "\n" to
// "\r\n", followed by the prompt "$ "; "exit [N]" ends the session with
// that status, Close with -1 and Signal "HUP". req.Argv is ignored; Env,
// Term and Dir apply to its commands. A Write waits while a line runs.
func (s *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: terminal in %s: %w", s.id, err)
	}
	t := &termSession{}
	t.cond = sync.NewCond(&t.mu)
	env := map[string]string{"TERM": cmp.Or(req.Term, "xterm-256color")}
	maps.Copy(env, req.Env)
	out := writerFunc(func(p []byte) (int, error) {
		t.emit(strings.ReplaceAll(string(p), "\n", "\r\n"))
		return len(p), nil
	})
	t.emit(Prompt)
	p, err := s.start(context.Background(), OpTerminal, drivers.Command{Argv: []string{"sh"}, Env: env, Dir: req.Dir}, out, out,
		func(ctx context.Context, inv Invocation) (int, error) {
			lines := bufio.NewScanner(inv.Stdin)
			for ; lines.Scan(); io.WriteString(inv.Stdout, Prompt) {
				line := inv
				line.Argv, line.Stdin = []string{"sh", "-c", lines.Text()}, strings.NewReader("")
				code, err := s.d.run(ctx, line)
				if f := strings.Fields(lines.Text()); err != nil || len(f) > 0 && f[0] == "exit" {
					return code, err
				}
			}
			return -1, ctx.Err()
		})
	if err != nil {
		return nil, err
	}
	t.process = p
	go func() {
		<-p.done
		t.mu.Lock()
		t.closed = true
		t.cond.Broadcast()
		t.mu.Unlock()
	}()
	return t, nil
}

func (t *termSession) emit(s string) {
	t.mu.Lock()
	t.out.WriteString(s)
	t.cond.Broadcast()
	t.mu.Unlock()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Read returns terminal output; io.EOF once the session ended and its
// output was read.
func (t *termSession) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.out.Len() == 0 && !t.closed {
		t.cond.Wait()
	}
	if t.out.Len() == 0 {
		return 0, io.EOF
	}
	return t.out.Read(p)
}

// Write sends keystrokes: they are echoed, and each line ending in "\n" or
// "\r" is run.
func (t *termSession) Write(p []byte) (int, error) {
	select {
	case <-t.done:
		return 0, io.ErrClosedPipe
	default:
	}
	t.emit(strings.NewReplacer("\r", "\r\n", "\n", "\r\n").Replace(string(p)))
	if _, err := io.WriteString(t.stdin, strings.ReplaceAll(string(p), "\r", "\n")); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the session and its running command.
func (t *termSession) Close() error {
	_ = t.Signal(context.Background(), "HUP")
	<-t.done
	return nil
}

// Resize checks the window size; the fake's commands do not read it.
func (t *termSession) Resize(ctx context.Context, rows, cols int) error {
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("fake: resize to %dx%d: rows and cols must be positive", rows, cols)
	}
	return ctx.Err()
}
