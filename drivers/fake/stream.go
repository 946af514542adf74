package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// process is a command started by Start.
type process struct {
	done   chan struct{}
	res    *drivers.Result
	err    error
	cancel context.CancelFunc
	stdin  *io.PipeWriter
	mu     sync.Mutex
	signal string
}

// Start runs cmd like Exec, streaming output to stdout and stderr (nil
// discards) as the command writes it. Wait returns the exit status; a
// signalled process ends with ExitCode -1 and Signal set. Cancelling ctx
// ends the process and Wait returns an error wrapping ctx.Err().
func (s *sandbox) Start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	if len(cmd.Argv) == 0 {
		return nil, fmt.Errorf("fake: start in %s: empty argv", s.id)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: start %q in %s: %w", cmd.Argv[0], s.id, err)
	}
	lv, err := s.begin(OpStream)
	if err != nil {
		return nil, err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	pr, pw := io.Pipe()
	p := &process{done: make(chan struct{}), stdin: pw}
	if cmd.Stdin != nil {
		driverkit.CopyStdin(pw, cmd.Stdin, p.done)
	} else {
		pw.Close()
	}
	rctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	stop := context.AfterFunc(lv.alive, cancel)
	sh := s.d.newShell(s.id, lv.host, cmd.Env, cmd.Dir, pr)
	start := s.d.clk.Now()
	var mu sync.Mutex
	go func() {
		defer close(p.done)
		defer stop()
		defer cancel()
		code, err := sh.runArgv(rctx, cmd.Argv, lockedWriter{&mu, stdout}, lockedWriter{&mu, stderr})
		pr.Close()
		res := &drivers.Result{ExitCode: code, Duration: s.d.clk.Now().Sub(start)}
		p.mu.Lock()
		sig := p.signal
		p.mu.Unlock()
		switch {
		case sig != "":
			res.ExitCode, res.Signal = -1, sig
		case lv.alive.Err() != nil:
			res.ExitCode, res.Signal = -1, "KILL"
		case ctx.Err() != nil:
			p.err = fmt.Errorf("fake: process %q in %s: %w", cmd.Argv[0], s.id, ctx.Err())
			return
		case err != nil:
			p.err = fmt.Errorf("fake: process %q in %s: %w", cmd.Argv[0], s.id, err)
			return
		}
		p.res = res
	}()
	return p, nil
}

// Wait blocks until the process ends, or until ctx ends (then it returns an
// error wrapping ctx.Err() and the process keeps running).
func (p *process) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, p.done); err != nil {
		return nil, fmt.Errorf("fake: wait: %w", err)
	}
	return p.res, p.err
}

// Signal ends the process with sig, one of driverkit.Signals (as
// driverkit.ParseSignal reads it; another name is an error wrapping
// drivers.ErrUnsupported). The fake has no signal handlers, so every
// signal of the set ends it. Signalling an ended process does nothing.
func (p *process) Signal(ctx context.Context, sig string) error {
	sig, err := driverkit.ParseSignal(sig)
	if err != nil {
		return fmt.Errorf("fake: %w", err)
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	p.mu.Lock()
	if p.signal == "" {
		p.signal = sig
	}
	p.mu.Unlock()
	p.cancel()
	return ctx.Err()
}

// CloseStdin closes the process's standard input.
func (p *process) CloseStdin() error { return p.stdin.Close() }

// termSession is the fake's terminal: an echo shell. Input is echoed as a
// terminal with echo on would; each complete line runs through the fake's
// sh subset, followed by the prompt "$ ". "exit [N]" ends the session.
type termSession struct {
	mu         sync.Mutex
	cond       *sync.Cond
	out        bytes.Buffer
	closed     bool
	line       []byte
	lines      chan string
	rows, cols int
	done       chan struct{}
	res        *drivers.Result
	cancel     context.CancelFunc
}

// Prompt is what the fake terminal prints when it waits for a line.
const Prompt = "$ "

// OpenTerminal opens an echo-shell session (see the package
// documentation). req.Argv is ignored; Env and Dir apply to its commands.
func (s *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: terminal in %s: %w", s.id, err)
	}
	lv, err := s.begin(OpTerminal)
	if err != nil {
		return nil, err
	}
	t := &termSession{rows: req.Rows, cols: req.Cols, lines: make(chan string, 64), done: make(chan struct{})}
	if t.rows <= 0 {
		t.rows = 24
	}
	if t.cols <= 0 {
		t.cols = 80
	}
	t.cond = sync.NewCond(&t.mu)
	env := map[string]string{"TERM": "xterm-256color"}
	if req.Term != "" {
		env["TERM"] = req.Term
	}
	for k, v := range req.Env {
		env[k] = v
	}
	sh := s.d.newShell(s.id, lv.host, env, req.Dir, strings.NewReader(""))
	sh.term = t
	rctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	stop := context.AfterFunc(lv.alive, cancel)
	t.emit(Prompt)
	go t.serve(rctx, sh, stop)
	return t, nil
}

func (t *termSession) emit(s string) {
	t.mu.Lock()
	t.out.WriteString(s)
	t.cond.Broadcast()
	t.mu.Unlock()
}

func (t *termSession) serve(ctx context.Context, sh *shell, stop func() bool) {
	defer stop()
	// Output goes through the terminal's onlcr translation, as on a PTY.
	w := writerFunc(func(p []byte) (int, error) {
		t.emit(strings.ReplaceAll(string(p), "\n", "\r\n"))
		return len(p), nil
	})
	res := &drivers.Result{ExitCode: -1, Signal: "HUP"}
	defer func() {
		t.mu.Lock()
		t.res = res
		t.closed = true
		t.cond.Broadcast()
		t.mu.Unlock()
		close(t.done)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case line := <-t.lines:
			code, err := sh.runScript(ctx, line, w, w)
			if ee := (*exitError)(nil); errors.As(err, &ee) || isExitLine(line) {
				res = &drivers.Result{ExitCode: code}
				return
			}
			if err != nil {
				return
			}
			t.emit(Prompt)
		}
	}
}

func isExitLine(line string) bool {
	f := strings.Fields(line)
	return len(f) > 0 && len(f) <= 2 && f[0] == "exit"
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
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return 0, io.ErrClosedPipe
	}
	var lines []string
	for _, c := range p {
		switch c {
		case '\r', '\n':
			t.out.WriteString("\r\n")
			lines = append(lines, string(t.line))
			t.line = t.line[:0]
		default:
			t.out.WriteByte(c)
			t.line = append(t.line, c)
		}
	}
	t.cond.Broadcast()
	t.mu.Unlock()
	for _, l := range lines {
		select {
		case t.lines <- l:
		case <-t.done:
			return len(p), nil
		}
	}
	return len(p), nil
}

// Close ends the session and its running command.
func (t *termSession) Close() error {
	t.cancel()
	<-t.done
	return nil
}

// Resize sets the window size that "stty size" reports.
func (t *termSession) Resize(ctx context.Context, rows, cols int) error {
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("fake: resize to %dx%d: rows and cols must be positive", rows, cols)
	}
	t.mu.Lock()
	t.rows, t.cols = rows, cols
	t.mu.Unlock()
	return ctx.Err()
}

func (t *termSession) size() (int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rows, t.cols
}

// Wait blocks until the session ends: ExitCode of "exit N", or -1 with
// Signal "HUP" when it was closed. If ctx ends first it returns an error
// wrapping ctx.Err() and the session stays open.
func (t *termSession) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, t.done); err != nil {
		return nil, fmt.Errorf("fake: terminal wait: %w", err)
	}
	return t.res, nil
}
