package fake

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/runner"
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
func (s *sandbox) begin(ctx context.Context, op opKind) (context.Context, *box, error) {
	fail := func(err error) (context.Context, *box, error) {
		return nil, nil, fmt.Errorf("fake: %s %s: %w", op, s.id, err)
	}
	switch {
	case ctx.Err() != nil:
		return fail(ctx.Err())
	case s.released.Load():
		return fail(drivers.ErrReleased)
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.d.callLocked(op, s.id); err != nil {
		return nil, nil, err
	}
	switch b, ok := s.d.boxes[s.id]; {
	case !ok || b.State == drivers.StateDestroyed:
		return fail(fmt.Errorf("sandbox %w", errcode.ErrNotFound))
	case b.stateAt(s.d.clock.Now()) != drivers.StateRunning:
		return fail(fmt.Errorf("sandbox is %s, not running", b.State))
	default:
		return b.alive, b, nil
	}
}

// Exec runs cmd as Start does and waits for it, keeping at most cmd.Limit()
// bytes of each stream. A command whose sandbox stops or vanishes ends
// killed (ExitCode -1, Signal "KILL"). After Release it returns
// drivers.ErrReleased; a lost or destroyed sandbox gives errcode.ErrNotFound.
func (s *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	stdout, stderr := driverkit.NewOutputBuffer(cmd.Limit()), driverkit.NewOutputBuffer(cmd.Limit())
	p, err := s.start(ctx, opExec, cmd, stdout, stderr, s.d.run)
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

// Start runs cmd (see the package documentation for what runs), streaming
// its output to stdout and stderr (nil discards). Cancelling ctx ends it,
// and Wait returns an error wrapping ctx.Err().
func (s *sandbox) Start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	return s.start(ctx, opStream, cmd, cmp.Or(stdout, io.Discard), cmp.Or(stderr, io.Discard), s.d.run)
}

// start counts op and runs cmd through run in a goroutine, with a pipe as
// its stdin, fed from cmd.Stdin (left open for the terminal).
func (s *sandbox) start(ctx context.Context, op opKind, cmd drivers.Command, stdout, stderr io.Writer, run HandlerFunc) (*process, error) {
	if len(cmd.Argv) == 0 {
		return nil, fmt.Errorf("fake: %s in %s: empty argv", op, s.id)
	}
	alive, _, err := s.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	p := &process{done: make(chan struct{}), stdin: pw}
	if cmd.Stdin != nil {
		driverkit.CopyStdin(pw, cmd.Stdin, p.done)
	} else if op != opTerminal {
		pw.Close()
	}
	rctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	stop := context.AfterFunc(alive, cancel)
	context.AfterFunc(rctx, func() { pr.CloseWithError(context.Canceled) })
	host := cmp.Or(s.d.platform.hostname, s.id)
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "HOSTNAME": host, "USER": "root"}
	maps.Copy(env, cmd.Env) // over the defaults
	var mu sync.Mutex
	inv := Invocation{Argv: cmd.Argv, Env: env, Dir: cmp.Or(cmd.Dir, defaultDir), Stdin: pr, Stdout: lockedWriter{&mu, stdout}, Stderr: lockedWriter{&mu, stderr}, SandboxID: s.id, host: host}
	start := s.d.clock.Now()
	go func() {
		defer close(p.done)
		code, err := run(rctx, inv)
		pr.Close()
		stop()
		cancel()
		res := &drivers.Result{ExitCode: code, Duration: s.d.clock.Now().Sub(start)}
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
// is an error wrapping drivers.ErrUnsupported): ExitCode -1, Signal sig.
func (p *process) Signal(ctx context.Context, sig string) error {
	sig, err := driverkit.ParseSignal(sig)
	if err != nil {
		return fmt.Errorf("fake: %w", err)
	}
	p.signal.CompareAndSwap(nil, &sig) // no effect once it ended
	p.cancel()
	return ctx.Err()
}

// CloseStdin closes the process's standard input.
func (p *process) CloseStdin() error { return p.stdin.Close() }

// Release ends the handle: Keep with the state read back; Stop and Destroy
// with a confirmed receipt (also for a lost sandbox), a fault's error (the
// handle stays), or a lie's receipt (FakeStop). A second Release returns
// drivers.ErrReleased; Keep of a lost sandbox, errcode.ErrNotFound.
func (s *sandbox) Release(ctx context.Context, disp drivers.Disposition) (r drivers.Receipt, err error) {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	switch {
	case s.released.Load():
		return r, fmt.Errorf("fake: release %s: %w", s.id, drivers.ErrReleased)
	case ctx.Err() != nil:
		return r, fmt.Errorf("fake: release %s: %w", s.id, ctx.Err())
	case disp == drivers.Keep:
		st, ok := (*controls)(s.d).State(s.id)
		if !ok || st == drivers.StateDestroyed {
			return r, fmt.Errorf("fake: keep %s: sandbox %w", s.id, errcode.ErrNotFound)
		}
		r = drivers.Receipt{ProviderLeaseID: s.id, State: st, Confirmed: true, ConfirmedAt: s.d.clock.Now(), Evidence: "kept; state read back: " + string(st)}
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

// ImageIdentity returns the identity the sandbox was created from, unless
// ReportWrongImage makes it lie.
func (s *sandbox) ImageIdentity(ctx context.Context) (images.Identity, error) {
	_, b, err := s.begin(ctx, opImageIdentity)
	if err != nil {
		return images.Identity{}, err
	}
	s.d.mu.Lock()
	wrong := s.d.wrongImage[s.id]
	s.d.mu.Unlock()
	switch {
	case !wrong:
		return b.Image, nil
	case b.Image.SnapshotID() != "":
		return images.SnapshotIdentity(s.d.provider, "wrong-"+b.Image.SnapshotID())
	}
	return images.DigestIdentity(b.Image.Repository(), fakeDigest("wrong:"+b.Image.Digest()))
}

// Capture saves the running sandbox as a new provider snapshot named
// req.Name (default "capture-<id>") and returns its identity.
func (s *sandbox) Capture(ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
	if _, _, err := s.begin(ctx, opCapture); err != nil {
		return images.Identity{}, err
	}
	return images.SnapshotIdentity(s.d.provider, (*controls)(s.d).AddSnapshot(cmp.Or(req.Name, "capture-"+s.id)))
}

// termSession is the fake's terminal (see OpenTerminal); its screen is an
// OS pipe, whose buffer keeps what is not read yet.
type termSession struct {
	*process
	screen *os.File  // the read end
	echo   io.Writer // the write end
}

// OpenTerminal opens an echo shell: input is echoed, each line runs as
// sh -c LINE (a Write waits for it), then the prompt "$ "; "exit [N]" ends
// the session, Close with Signal "HUP". Env, Term and Dir apply; Argv not.
func (s *sandbox) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: terminal in %s: %w", s.id, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("fake: terminal in %s: %w", s.id, err)
	}
	env := map[string]string{"TERM": cmp.Or(req.Term, "xterm-256color")}
	maps.Copy(env, req.Env)
	t := &termSession{screen: r, echo: crlf{w}}
	io.WriteString(t.echo, "$ ") // the prompt
	t.process, err = s.start(context.Background(), opTerminal, drivers.Command{Argv: []string{"sh"}, Env: env, Dir: req.Dir}, t.echo, t.echo,
		func(ctx context.Context, inv Invocation) (int, error) {
			defer w.Close()
			for lines := bufio.NewScanner(inv.Stdin); lines.Scan(); io.WriteString(inv.Stdout, "$ ") {
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
		r.Close()
		w.Close()
		return nil, err
	}
	return t, nil
}

// crlf writes to w with "\n" as "\r\n", as a terminal shows it.
type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	_, err := io.WriteString(c.w, strings.ReplaceAll(string(p), "\n", "\r\n"))
	return len(p), err
}

// Read returns terminal output, io.EOF once the session ended.
func (t *termSession) Read(p []byte) (int, error) { return t.screen.Read(p) }

// Write sends keystrokes: they are echoed, and each line is run.
func (t *termSession) Write(p []byte) (int, error) {
	select {
	case <-t.done:
		return 0, io.ErrClosedPipe
	default:
	}
	in := strings.ReplaceAll(string(p), "\r", "\n")
	io.WriteString(t.echo, in)
	if _, err := io.WriteString(t.stdin, in); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the session and its running command.
func (t *termSession) Close() error {
	_ = t.Signal(context.Background(), "HUP")
	<-t.done
	t.screen.Close()
	return nil
}

// Resize checks the window size; the fake's commands do not read it.
func (t *termSession) Resize(ctx context.Context, rows, cols int) error {
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("fake: resize to %dx%d: rows and cols must be positive", rows, cols)
	}
	return ctx.Err()
}

// HostRunner opens an ingress on a unix socket in a fresh temporary
// directory, one at a time per sandbox. As the fake's sandboxes live in
// this process, so does its runner: Launch runs internal/runner (spec is checked,
// its binary never run) until the sandbox stops or is destroyed.
func (s *sandbox) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	fail := func(err error) (drivers.RunnerIngress, error) {
		return nil, fmt.Errorf("fake: host runner in %s: %w", s.id, err)
	}
	if err := spec.Validate(); err != nil {
		return fail(err)
	}
	alive, _, err := s.begin(ctx, opRunner)
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
func (in *ingress) Endpoint() string { return "unix:" + in.sock }

// Close closes the listener and removes its directory, not the runner.
func (in *ingress) Close() error {
	if in.closed.Swap(true) {
		return nil
	}
	return errors.Join(in.Listener.Close(), os.RemoveAll(in.dir))
}

// Launch starts internal/runner in this process with a state directory of its
// own and the ticket in memory; req.Env is added to its tasks' environment.
func (in *ingress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	fail := func(err error) error { return fmt.Errorf("fake: launch runner in %s: %w", in.s.id, err) }
	if in.closed.Load() {
		return fail(errors.New("the ingress is closed"))
	}
	if _, _, err := in.s.begin(ctx, opRunner); err != nil {
		return err
	}
	if req.Lease == "" || req.Ticket == "" {
		return fail(errors.New("lease and ticket are required"))
	}
	state, err := os.MkdirTemp("", "berth-fake-runner-state-")
	if err != nil {
		return fail(err)
	}
	log, env := &tailLog{}, os.Environ()
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	in.log.Store(log)
	r, err := runner.New(in.Endpoint(), state, &runner.Options{Lease: req.Lease, Ticket: req.Ticket, BaseEnv: env,
		TaskDir: in.s.taskDir, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		os.RemoveAll(state)
		fmt.Fprintln(log, "berth-runner:", err)
		return fail(err)
	}
	go func() {
		defer os.RemoveAll(state)
		// As cmd/berth-runner does: the error that ended the runner is
		// its log's last line.
		if err := r.Run(in.alive); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(log, "berth-runner:", err)
		}
	}()
	return nil
}

// LogTail returns the last limit bytes (at most 64 KiB: driverkit.ClampLogTail) of
// what the last Launch's runner logged: its slog text and the error it
// ended with, as cmd/berth-runner writes them; nil before any Launch.
func (in *ingress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: runner log of %s: %w", in.s.id, err)
	}
	l := cmp.Or(in.log.Load(), &tailLog{})
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf[max(0, len(l.buf)-driverkit.ClampLogTail(limit)):]), nil
}

// tailLog keeps the last 64 KiB written to it (what LogTail may return).
type tailLog struct {
	mu  sync.Mutex
	buf []byte
}

func (l *tailLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - driverkit.ClampLogTail(math.MaxInt); over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// RunnerArch implements drivers.ArchReporter: runtime.GOARCH, as the
// fake's runner runs in this process.
func (d *Driver) RunnerArch(ctx context.Context, cfg config.Config) (string, error) {
	return runtime.GOARCH, nil
}

// EngineKernel returns the kernel release of the machine the sandbox runs
// on, as the probe's isolation measurement asks a sandbox for it: the
// platform's (what the built-in uname -r prints), since the fake's
// sandboxes share this process's "kernel". A handler that answers uname
// otherwise shows a kernel of the sandbox's own.
func (s *sandbox) EngineKernel(context.Context) (string, error) { return s.d.platform.kernel, nil }
