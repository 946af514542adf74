package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/pkg/stdcopy"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/drivers/internal/handoff"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
)

// streamChunk is the most bytes of stdin, a terminal's output or a
// file archive one message carries: 32 KiB less room for the message's
// own bytes (see poolFit).
const streamChunk = 32<<10 - poolFit

// poolFit is room for a message's own bytes beyond its payload (field
// tags, lengths): a message's buffers come from power-of-two tiers
// (dirtyPool), and a payload of a tier less poolFit fits its tier
// instead of taking one twice its size.
const poolFit = 64

// outMessage is the most bytes of stdout or stderr one message carries:
// 1 MiB less poolFit, so that a driver's write (32 KiB from the Docker
// engine) crosses whole in one message.
const outMessage = 1<<20 - poolFit

// The plugin's side of a streaming process.

// Start serves one streaming process of a sandbox handle.
func (s *server) Start(stream pluginpb.Driver_StartServer) error {
	in, err := stream.Recv()
	if err != nil {
		return err
	}
	start := in.GetStart()
	if start == nil {
		return errors.New("start: the first message is not start")
	}
	var sendMu sync.Mutex
	send := func(m *pluginpb.StartOut) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	fail := func(err error) error {
		return send(&pluginpb.StartOut{Msg: &pluginpb.StartOut_Error{Error: errorToWire(err)}})
	}
	sb, err := s.sandbox(start.GetHandle())
	if err != nil {
		return fail(err)
	}
	se, ok := sb.(drivers.StreamExecer)
	if !ok {
		return fail(fmt.Errorf("sandbox %q: capability stream_exec: %w", sb.ID(), drivers.ErrUnsupported))
	}
	ctx := stream.Context()
	cmd := drivers.Command{Argv: start.GetArgv(), Env: start.GetEnv(), Dir: start.GetDir()}
	var stdin *io.PipeWriter
	if start.GetHasStdin() {
		var r *io.PipeReader
		r, stdin = io.Pipe()
		cmd.Stdin = r
	}
	out := func(stderr bool) writerFunc {
		return writerFunc(func(p []byte) (int, error) {
			for rest := p; len(rest) > 0; {
				n := min(len(rest), outMessage)
				m := &pluginpb.StartOut{Msg: &pluginpb.StartOut_Stdout{Stdout: rest[:n]}}
				if stderr {
					m = &pluginpb.StartOut{Msg: &pluginpb.StartOut_Stderr{Stderr: rest[:n]}}
				}
				if err := send(m); err != nil {
					return 0, err
				}
				rest = rest[n:]
			}
			return len(p), nil
		})
	}
	stdout := &outTaker{writerFunc: out(false), s: s, ctx: ctx, send: send, ended: make(chan error, 1)}
	p, err := se.Start(ctx, cmd, stdout, out(true))
	if err != nil {
		return fail(err)
	}
	if err := send(&pluginpb.StartOut{Msg: &pluginpb.StartOut_Started{Started: true}}); err != nil {
		return err
	}
	// The host's messages: stdin is written by a goroutine of its own, so
	// that a process that does not read stdin does not hold up signals.
	data := make(chan []byte, 64)
	go func() {
		for b := range data {
			if _, err := stdin.Write(b); err != nil {
				break
			}
		}
		for range data { // drain after a failed write
		}
		if stdin != nil {
			_ = stdin.Close()
		}
	}()
	go func() {
		closed := false
		closeStdin := func() {
			if !closed {
				closed = true
				close(data)
			}
		}
		defer closeStdin()
		for {
			in, err := stream.Recv()
			if err != nil {
				return
			}
			switch m := in.GetMsg().(type) {
			case *pluginpb.StartIn_Stdin:
				if stdin != nil && !closed {
					data <- m.Stdin
				}
			case *pluginpb.StartIn_CloseStdin:
				if stdin != nil {
					closeStdin()
				} else {
					_ = p.CloseStdin()
				}
			case *pluginpb.StartIn_OutputEnded:
				select {
				case stdout.ended <- errorFromWire("host", m.OutputEnded.GetError()):
				default:
				}
			case *pluginpb.StartIn_Signal:
				err := p.Signal(ctx, m.Signal)
				if send(&pluginpb.StartOut{Msg: &pluginpb.StartOut_SignalAck{SignalAck: &pluginpb.SignalAck{Error: errorToWire(err)}}}) != nil {
					return
				}
			}
		}
	}()
	res, err := p.Wait(ctx)
	exit := &pluginpb.ExecReply{Error: errorToWire(err)}
	if res != nil {
		exit.ExitCode, exit.Signal, exit.DurationNs = int64(res.ExitCode), res.Signal, int64(res.Duration)
	}
	return send(&pluginpb.StartOut{Msg: &pluginpb.StartOut_Exit{Exit: exit}})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// outTaker is the stdout a plugin gives its driver's streaming process:
// it writes stdout messages, and takes the output's connection when the
// driver hands it over (handoff.Taker) and the host gave an output socket
// (outsock.go).
type outTaker struct {
	writerFunc
	s     *server
	ctx   context.Context // the stream's
	send  func(*pluginpb.StartOut) error
	ended chan error // the host's output_ended
	taken atomic.Bool
}

// TakeOutput sends a duplicate of o's descriptor on the output socket
// and its id on the stream; the host reads the connection and answers
// output_ended. It declines without an output socket, for a format the
// host does not read, and after a first connection.
func (t *outTaker) TakeOutput(o handoff.Output) (<-chan error, bool) {
	defer o.File.Close()
	if t.s.out == nil || o.Format != handoff.DockerMultiplexed || t.taken.Swap(true) {
		return nil, false
	}
	id, err := t.s.out.send(o.File)
	if err != nil {
		return nil, false
	}
	done := make(chan error, 1)
	if err := t.send(&pluginpb.StartOut{Msg: &pluginpb.StartOut_OutputConn{OutputConn: &pluginpb.OutputConn{
		Id: id, Buffered: o.Buffered, Format: o.Format}}}); err != nil {
		done <- err // the stream ended: the host reads nothing (it closes the descriptor with the process)
		return done, true
	}
	go func() {
		select {
		case err := <-t.ended:
			done <- err
		case <-t.ctx.Done():
			done <- t.ctx.Err()
		}
	}()
	return done, true
}

// The host's side.

// streamer gives the sandbox of a plugin that declares stream_exec its
// drivers.StreamExecer.
type streamer struct{ s *sandbox }

// Start runs cmd through the plugin and streams its output to stdout and
// stderr. Cancelling ctx ends the process tree.
func (x streamer) Start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	s := x.s
	if s.released.Load() {
		return nil, fmt.Errorf("sandbox %q: start: %w", s.id, drivers.ErrReleased)
	}
	rpc, handle, err := s.live(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	st, err := rpc.Start(sctx)
	if err != nil {
		cancel()
		return nil, s.c.callErr(ctx, "start", err)
	}
	p := &process{s: s, st: st, ctx: ctx, cancel: cancel, done: make(chan struct{}), acks: make(chan error, 1)}
	p.stdout, p.stderr = lockedWriter{&p.outMu, stdout}, lockedWriter{&p.outMu, stderr}
	if d, ok := rpc.(*dispensed); ok {
		p.out = d.out
	}
	start := &pluginpb.StartCommand{Handle: handle, Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, HasStdin: cmd.Stdin != nil}
	if err := p.send(&pluginpb.StartIn{Msg: &pluginpb.StartIn_Start{Start: start}}); err != nil {
		cancel()
		return nil, s.c.callErr(ctx, "start", err)
	}
	// Output may come before started: the driver's process runs as soon as
	// the driver's Start has it going.
	for started := false; !started; {
		m, err := st.Recv()
		if err != nil {
			p.stopOutput()
			cancel()
			return nil, s.c.callErr(ctx, "start", err)
		}
		switch m := m.GetMsg().(type) {
		case *pluginpb.StartOut_Started:
			started = true
		case *pluginpb.StartOut_Stdout:
			writeTo(p.stdout, m.Stdout)
		case *pluginpb.StartOut_Stderr:
			writeTo(p.stderr, m.Stderr)
		case *pluginpb.StartOut_OutputConn:
			if err := p.takeOutput(m.OutputConn); err != nil {
				p.stopOutput()
				cancel()
				return nil, s.c.callErr(ctx, "start", err)
			}
		case *pluginpb.StartOut_Error:
			p.stopOutput()
			cancel()
			return nil, errorFromWire(s.c.name(), m.Error)
		default:
			p.stopOutput()
			cancel()
			return nil, s.c.callErr(ctx, "start", errors.New("protocol: a message before started"))
		}
	}
	go p.receive()
	if cmd.Stdin != nil {
		driverkit.CopyStdin(stdinSender{p}, cmd.Stdin, p.done)
	}
	return p, nil
}

// process is a streaming process of a plugin's sandbox.
type process struct {
	s      *sandbox
	st     pluginpb.Driver_StartClient
	ctx    context.Context    // Start's
	cancel context.CancelFunc // the stream's, once it ended
	done   chan struct{}      // closed when the exit (or the stream's end) is received and the output delivered
	res    *drivers.Result
	err    error

	outMu          sync.Mutex
	stdout, stderr lockedWriter // Start's, one write at a time (outMu)
	out            *outSocket   // the process's output socket, nil without one

	// The output's connection, when the plugin handed it over (outsock.go):
	// read by a goroutine of its own until outDone.
	outFile  *os.File
	outDone  chan struct{}
	outEnded atomic.Bool // every byte read was delivered, output_ended sent

	sendMu sync.Mutex
	ackMu  sync.Mutex // one Signal waits for its ack at a time
	acks   chan error
}

func (p *process) send(m *pluginpb.StartIn) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return p.st.Send(m)
}

// receive writes the output as it comes, hands signal acks over and
// records the exit. It ends the stream, and the output's connection
// when one was handed over, before it closes done: no output is written
// after Wait returned.
func (p *process) receive() {
	defer close(p.done)
	defer p.cancel()
	for {
		m, err := p.st.Recv()
		if err != nil {
			p.stopOutput()
			p.err = p.s.c.callErr(p.ctx, "wait", err)
			if errors.Is(err, io.EOF) {
				p.err = p.s.c.callErr(p.ctx, "wait", errors.New("protocol: the stream ended without an exit"))
			}
			return
		}
		switch m := m.GetMsg().(type) {
		case *pluginpb.StartOut_Stdout:
			writeTo(p.stdout, m.Stdout)
		case *pluginpb.StartOut_Stderr:
			writeTo(p.stderr, m.Stderr)
		case *pluginpb.StartOut_OutputConn:
			if err := p.takeOutput(m.OutputConn); err != nil {
				p.stopOutput()
				p.err = p.s.c.callErr(p.ctx, "wait", err)
				return
			}
		case *pluginpb.StartOut_SignalAck:
			select {
			case p.acks <- errorFromWire(p.s.c.name(), m.SignalAck.GetError()):
			default:
			}
		case *pluginpb.StartOut_Exit:
			if p.outDone != nil && !p.outEnded.Load() {
				// An exit before the host said the output ended: the
				// plugin did not wait for it.
				p.stopOutput()
				p.err = p.s.c.callErr(p.ctx, "wait", errors.New("protocol: exit before output_ended"))
				return
			}
			p.stopOutput() // ended: returns once its reader did
			if err := errorFromWire(p.s.c.name(), m.Exit.GetError()); err != nil {
				p.err = err
				return
			}
			p.res = &drivers.Result{ExitCode: int(m.Exit.GetExitCode()), Signal: m.Exit.GetSignal(), Duration: time.Duration(m.Exit.GetDurationNs())}
			return
		}
	}
}

// takeOutput claims the connection the plugin handed over and reads it,
// demultiplexed, into stdout and stderr until its end; it then answers
// output_ended, saying why when it stopped short (a write that failed,
// the connection closed by stopOutput).
func (p *process) takeOutput(m *pluginpb.OutputConn) error {
	if p.out == nil || p.outDone != nil || m.GetFormat() != handoff.DockerMultiplexed {
		return fmt.Errorf("protocol: an output connection not asked for (format %q)", m.GetFormat())
	}
	f, err := p.out.claim(p.ctx, m.GetId())
	if err != nil {
		return fmt.Errorf("output connection: %w", err)
	}
	outputConnsTaken.Add(1)
	p.outFile, p.outDone = f, make(chan struct{})
	go func() {
		defer close(p.outDone)
		_, err := stdcopy.StdCopy(p.stdout, p.stderr, io.MultiReader(bytes.NewReader(m.GetBuffered()), f))
		_ = f.Close()
		p.outEnded.Store(true)
		if err != nil {
			err = fmt.Errorf("reading the output connection: %w", err)
		}
		_ = p.send(&pluginpb.StartIn{Msg: &pluginpb.StartIn_OutputEnded{OutputEnded: &pluginpb.OutputEnded{Error: errorToWire(err)}}})
	}()
	return nil
}

// outputConnsTaken counts the output connections this process took (the
// tests check that a Docker plugin's stream comes on one).
var outputConnsTaken atomic.Int64

// stopOutput closes the output's connection, if one was handed over,
// and returns once its reader ended.
func (p *process) stopOutput() {
	if p.outDone == nil {
		return
	}
	_ = p.outFile.Close()
	<-p.outDone
}

// lockedWriter writes to w (nil: discards) one write at a time: the
// messages' output and a connection's are written by different
// goroutines.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	if l.w == nil {
		return len(b), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// writeTo writes b to w; w's error is not the plugin's, and the next
// message is written still.
func writeTo(w io.Writer, b []byte) {
	_, _ = w.Write(b)
}

// Wait waits for the exit, honouring ctx (the process keeps running when
// ctx ends first).
func (p *process) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, p.done); err != nil {
		return nil, fmt.Errorf("sandbox %q: wait: %w", p.s.id, err)
	}
	return p.res, p.err
}

// Signal sends sig to the process group through the plugin and returns
// the driver's answer. Signalling a process that ended is not an error.
func (p *process) Signal(ctx context.Context, sig string) error {
	p.ackMu.Lock()
	defer p.ackMu.Unlock()
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.send(&pluginpb.StartIn{Msg: &pluginpb.StartIn_Signal{Signal: sig}}); err != nil {
		select {
		case <-p.done: // the process ended meanwhile
			return nil
		default:
		}
		return p.s.c.callErr(ctx, "signal", err)
	}
	select {
	case err := <-p.acks:
		return err
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox %q: signal %s: %w", p.s.id, sig, ctx.Err())
	}
}

// CloseStdin closes the process's standard input.
func (p *process) CloseStdin() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.send(&pluginpb.StartIn{Msg: &pluginpb.StartIn_CloseStdin{CloseStdin: true}}); err != nil && !errors.Is(err, io.EOF) {
		return p.s.c.callErr(p.ctx, "close stdin", err)
	}
	return nil
}

// stdinSender sends what is written as stdin messages and Close as
// close_stdin.
type stdinSender struct{ p *process }

func (w stdinSender) Write(b []byte) (int, error) {
	for rest := b; len(rest) > 0; {
		n := min(len(rest), streamChunk)
		if err := w.p.send(&pluginpb.StartIn{Msg: &pluginpb.StartIn_Stdin{Stdin: append([]byte(nil), rest[:n]...)}}); err != nil {
			return 0, err
		}
		rest = rest[n:]
	}
	return len(b), nil
}

func (w stdinSender) Close() error { return w.p.CloseStdin() }
