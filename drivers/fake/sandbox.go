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
	"sync/atomic"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/images"
)

// sandbox is a handle to one fake sandbox; several handles (Acquire, then
// Resume) share its provider state, and each is released on its own.
type sandbox struct {
	d         *Driver
	id        string
	released  atomic.Bool
	relMu     sync.Mutex // serializes Release
	ingressMu sync.Mutex
	ingress   *ingress // the open runner ingress, if any
}

// ID returns the provider lease id ("fake-1", "fake-2", ...).
func (s *sandbox) ID() string { return s.id }

// begin checks ctx, counts a call of op and checks that the handle is not
// released and the sandbox runs. It returns the sandbox's life and box.
func (s *sandbox) begin(ctx context.Context, op Op) (context.Context, *box, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("fake: %s %s: %w", op, s.id, err)
	}
	if s.released.Load() {
		return nil, nil, fmt.Errorf("fake: %s %s: %w", op, s.id, drivers.ErrReleased)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.callLocked(op, s.id); err != nil {
		return nil, nil, err
	}
	b, ok := d.boxes[s.id]
	if !ok || b.State == drivers.StateDestroyed {
		return nil, nil, fmt.Errorf("fake: %s %s: sandbox %w", op, s.id, drivers.ErrNotFound)
	}
	if st := b.stateAt(d.o.Clock.Now()); st != drivers.StateRunning {
		return nil, nil, fmt.Errorf("fake: %s %s: sandbox is %s, not running", op, s.id, st)
	}
	return b.alive, b, nil
}

// Exec runs cmd as Start does (see the package documentation for what
// runs) and waits for it, keeping at most cmd.Limit() bytes of each stream.
// On cancellation it returns an error wrapping ctx.Err(); a command whose
// sandbox stops or vanishes ends killed (ExitCode -1, Signal "KILL"). After
// Release it returns drivers.ErrReleased; a lost or destroyed sandbox gives
// drivers.ErrNotFound.
func (s *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	stdout, stderr := driverkit.NewOutputBuffer(cmd.Limit()), driverkit.NewOutputBuffer(cmd.Limit())
	p, err := s.start(ctx, OpExec, cmd, stdout, stderr, nil)
	if err != nil {
		return nil, err
	}
	if <-p.done; p.err != nil {
		return nil, p.err
	}
	p.res.Stdout, p.res.Stderr = stdout.Bytes(), stderr.Bytes()
	p.res.Truncated = stdout.Truncated() || stderr.Truncated()
	return p.res, nil
}

// process is a command started by Start.
type process struct {
	done   chan struct{}
	res    *drivers.Result
	err    error
	cancel context.CancelFunc
	stdin  *io.PipeWriter
	signal atomic.Pointer[string]
}

// Start runs cmd (see Exec), streaming output to stdout and stderr (nil
// discards) as the command writes it. Wait returns the exit status; a
// signalled process ends with ExitCode -1 and Signal set. Cancelling ctx
// ends the process and Wait returns an error wrapping ctx.Err().
func (s *sandbox) Start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	return s.start(ctx, OpStream, cmd, cmp.Or(stdout, io.Discard), cmp.Or(stderr, io.Discard), nil)
}

// start counts op and runs cmd in a goroutine through run (nil: Driver.run)
// with a pipe as its stdin, fed from cmd.Stdin (left open for the terminal).
func (s *sandbox) start(ctx context.Context, op Op, cmd drivers.Command, stdout, stderr io.Writer, run HandlerFunc) (*process, error) {
	if len(cmd.Argv) == 0 {
		return nil, fmt.Errorf("fake: %s in %s: empty argv", op, s.id)
	}
	alive, b, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	p := &process{done: make(chan struct{}), stdin: pw}
	if cmd.Stdin != nil {
		driverkit.CopyStdin(pw, cmd.Stdin, p.done)
	} else if op != OpTerminal {
		pw.Close()
	}
	rctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	stop := context.AfterFunc(alive, cancel)
	context.AfterFunc(rctx, func() { pr.CloseWithError(context.Canceled) })
	var mu sync.Mutex
	inv := invocation(s.id, b.hostname, cmd, pr, lockedWriter{&mu, stdout}, lockedWriter{&mu, stderr})
	start := s.d.o.Clock.Now()
	go func() {
		defer close(p.done)
		defer stop()
		defer cancel()
		if run == nil {
			run = s.d.run
		}
		code, err := run(rctx, inv)
		pr.Close()
		res := &drivers.Result{ExitCode: code, Duration: s.d.o.Clock.Now().Sub(start)}
		switch sig := p.signal.Load(); {
		case sig != nil:
			res.ExitCode, res.Signal = -1, *sig
		case alive.Err() != nil:
			res.ExitCode, res.Signal = -1, "KILL"
		case ctx.Err() != nil:
			err = ctx.Err()
			fallthrough
		case err != nil:
			p.err = fmt.Errorf("fake: %s %q in %s: %w", op, cmd.Argv[0], s.id, err)
			return
		}
		p.res = res
	}()
	return p, nil
}

// lockedWriter serializes writes of concurrent goroutines to one writer.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Wait blocks until the process ends, or until ctx ends (an error wrapping
// ctx.Err(); the process keeps running).
func (p *process) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, p.done); err != nil {
		return nil, fmt.Errorf("fake: wait: %w", err)
	}
	return p.res, p.err
}

// Signal ends the process with sig, one of driverkit.Signals (another name
// is an error wrapping drivers.ErrUnsupported); the fake's commands handle
// no signal. Signalling an ended process does nothing.
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
	p.signal.CompareAndSwap(nil, &sig)
	p.cancel()
	return ctx.Err()
}

// CloseStdin closes the process's standard input.
func (p *process) CloseStdin() error { return p.stdin.Close() }

// Release ends the handle. Keep leaves the sandbox running, with a receipt
// of its state read back. Stop and Destroy return a confirmed receipt for
// this sandbox (StateStopped or StateDestroyed), unless a fault refuses the
// stop (its error; state and handle unchanged, so Release may be retried)
// or a lie (FakeStop) gives a receipt that proves nothing. A lost sandbox
// gives a confirmed "not found" StateDestroyed receipt, and
// drivers.ErrNotFound for Keep. A second Release returns drivers.ErrReleased.
func (s *sandbox) Release(ctx context.Context, disp drivers.Disposition) (r drivers.Receipt, err error) {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	switch st, ok := s.d.State(s.id); {
	case s.released.Load():
		return r, fmt.Errorf("fake: release %s: %w", s.id, drivers.ErrReleased)
	case ctx.Err() != nil:
		return r, fmt.Errorf("fake: release %s: %w", s.id, ctx.Err())
	case disp == drivers.Keep && (!ok || st == drivers.StateDestroyed):
		return r, fmt.Errorf("fake: keep %s: sandbox %w", s.id, drivers.ErrNotFound)
	case disp == drivers.Keep:
		r = drivers.Receipt{ProviderLeaseID: s.id, State: st, Confirmed: true, ConfirmedAt: s.d.o.Clock.Now(), Evidence: "kept; state read back: " + string(st)}
	case disp == drivers.Stop || disp == drivers.Destroy:
		if r, err = s.d.terminate(s.id, disp); err != nil {
			return drivers.Receipt{}, err
		}
	default:
		return r, fmt.Errorf("fake: release %s: unknown %s", s.id, disp)
	}
	s.released.Store(true)
	return r, nil
}

// ImageIdentity returns the identity of the image the sandbox was created
// from (a digest or a snapshot of this provider); ReportWrongImage makes it
// lie.
func (s *sandbox) ImageIdentity(ctx context.Context) (images.Identity, error) {
	_, b, err := s.begin(ctx, OpImageIdentity)
	if err != nil {
		return images.Identity{}, err
	}
	s.d.mu.Lock()
	wrong := s.d.wrongImage[s.id]
	s.d.mu.Unlock()
	switch {
	case !wrong:
		return b.Image, nil
	case b.Image.Kind() == images.KindSnapshot:
		return images.SnapshotIdentity(s.d.provider, "wrong-"+b.Image.SnapshotID())
	}
	return images.DigestIdentity(b.Image.Repository(), fakeDigest("wrong:"+b.Image.Digest()))
}

// Capture saves the running sandbox as a new provider snapshot named
// req.Name (default "capture-<id>") and returns its identity.
func (s *sandbox) Capture(ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
	if _, _, err := s.begin(ctx, OpCapture); err != nil {
		return images.Identity{}, err
	}
	return images.SnapshotIdentity(s.d.provider, s.d.AddSnapshot(cmp.Or(req.Name, "capture-"+s.id)))
}

// prompt is what the fake terminal prints when it waits for a line.
const prompt = "$ "

// termSession is the fake's terminal: an echo shell (see OpenTerminal).
type termSession struct {
	*process
	mu    sync.Mutex
	cond  *sync.Cond
	out   bytes.Buffer
	ended bool
}

// OpenTerminal opens an echo shell: input is echoed ("\r" and "\n" as
// "\r\n"); each line runs as sh -c LINE, its output's "\n" as "\r\n",
// then the prompt "$ "; "exit [N]" ends the session with that status,
// Close with -1 and Signal "HUP". req.Argv is ignored; Env, Term and Dir
// apply to its commands. A Write waits while a line runs.
func (s *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: terminal in %s: %w", s.id, err)
	}
	t := &termSession{}
	t.cond = sync.NewCond(&t.mu)
	env := map[string]string{"TERM": cmp.Or(req.Term, "xterm-256color")}
	maps.Copy(env, req.Env)
	t.emit(prompt, false)
	p, err := s.start(context.Background(), OpTerminal, drivers.Command{Argv: []string{"sh"}, Env: env, Dir: req.Dir}, termOut{t}, termOut{t},
		func(ctx context.Context, inv Invocation) (int, error) {
			defer t.emit("", true)
			for lines := bufio.NewScanner(inv.Stdin); lines.Scan(); io.WriteString(inv.Stdout, prompt) {
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
	return t, nil
}

// emit adds s to the output; end marks the session ended.
func (t *termSession) emit(s string, end bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.out.WriteString(s)
	t.ended = t.ended || end
	t.cond.Broadcast()
}

// Read returns terminal output; io.EOF once the session ended and its
// output was read.
func (t *termSession) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.out.Len() == 0 && !t.ended {
		t.cond.Wait()
	}
	return t.out.Read(p)
}

// termOut is the output of the terminal's commands.
type termOut struct{ t *termSession }

func (o termOut) Write(p []byte) (int, error) {
	o.t.emit(strings.ReplaceAll(string(p), "\n", "\r\n"), false)
	return len(p), nil
}

// Write sends keystrokes: they are echoed, and each line ending in "\n" or
// "\r" is run.
func (t *termSession) Write(p []byte) (int, error) {
	select {
	case <-t.done:
		return 0, io.ErrClosedPipe
	default:
	}
	t.emit(strings.NewReplacer("\r", "\r\n", "\n", "\r\n").Replace(string(p)), false)
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
