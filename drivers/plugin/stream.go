package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
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
	out := func(stderr bool) io.Writer {
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
	p, err := se.Start(ctx, cmd, out(false), out(true))
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
	st, err := rpc.Start(ctx)
	if err != nil {
		return nil, s.c.callErr(ctx, "start", err)
	}
	p := &process{s: s, st: st, ctx: ctx, done: make(chan struct{}), acks: make(chan error, 1)}
	start := &pluginpb.StartCommand{Handle: handle, Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, HasStdin: cmd.Stdin != nil}
	if err := p.send(&pluginpb.StartIn{Msg: &pluginpb.StartIn_Start{Start: start}}); err != nil {
		return nil, s.c.callErr(ctx, "start", err)
	}
	// Output may come before started: the driver's process runs as soon as
	// the driver's Start has it going.
	for started := false; !started; {
		m, err := st.Recv()
		if err != nil {
			return nil, s.c.callErr(ctx, "start", err)
		}
		switch m := m.GetMsg().(type) {
		case *pluginpb.StartOut_Started:
			started = true
		case *pluginpb.StartOut_Stdout:
			writeTo(stdout, m.Stdout)
		case *pluginpb.StartOut_Stderr:
			writeTo(stderr, m.Stderr)
		case *pluginpb.StartOut_Error:
			return nil, errorFromWire(s.c.name(), m.Error)
		default:
			return nil, s.c.callErr(ctx, "start", errors.New("protocol: a message before started"))
		}
	}
	go p.receive(stdout, stderr)
	if cmd.Stdin != nil {
		driverkit.CopyStdin(stdinSender{p}, cmd.Stdin, p.done)
	}
	return p, nil
}

// process is a streaming process of a plugin's sandbox.
type process struct {
	s    *sandbox
	st   pluginpb.Driver_StartClient
	ctx  context.Context // Start's
	done chan struct{}   // closed when the exit (or the stream's end) is received
	res  *drivers.Result
	err  error

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
// records the exit.
func (p *process) receive(stdout, stderr io.Writer) {
	defer close(p.done)
	for {
		m, err := p.st.Recv()
		if err != nil {
			p.err = p.s.c.callErr(p.ctx, "wait", err)
			if errors.Is(err, io.EOF) {
				p.err = p.s.c.callErr(p.ctx, "wait", errors.New("protocol: the stream ended without an exit"))
			}
			return
		}
		switch m := m.GetMsg().(type) {
		case *pluginpb.StartOut_Stdout:
			writeTo(stdout, m.Stdout)
		case *pluginpb.StartOut_Stderr:
			writeTo(stderr, m.Stderr)
		case *pluginpb.StartOut_SignalAck:
			select {
			case p.acks <- errorFromWire(p.s.c.name(), m.SignalAck.GetError()):
			default:
			}
		case *pluginpb.StartOut_Exit:
			if err := errorFromWire(p.s.c.name(), m.Exit.GetError()); err != nil {
				p.err = err
				return
			}
			p.res = &drivers.Result{ExitCode: int(m.Exit.GetExitCode()), Signal: m.Exit.GetSignal(), Duration: time.Duration(m.Exit.GetDurationNs())}
			return
		}
	}
}

// writeTo writes b to w, unless w is nil (discarded).
func writeTo(w io.Writer, b []byte) {
	if w != nil {
		_, _ = w.Write(b)
	}
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
