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

// The terminal, on both sides.

// Terminal serves one interactive session of a sandbox handle.
func (s *server) Terminal(stream pluginpb.Driver_TerminalServer) error {
	in, err := stream.Recv()
	if err != nil {
		return err
	}
	open := in.GetOpen()
	if open == nil {
		return errors.New("terminal: the first message is not open")
	}
	var sendMu sync.Mutex
	send := func(m *pluginpb.TerminalOut) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	fail := func(err error) error {
		return send(&pluginpb.TerminalOut{Msg: &pluginpb.TerminalOut_Error{Error: errorToWire(err)}})
	}
	sb, err := s.sandbox(open.GetHandle())
	if err != nil {
		return fail(err)
	}
	tm, ok := sb.(drivers.Terminal)
	if !ok {
		return fail(fmt.Errorf("sandbox %q: capability terminal: %w", sb.ID(), drivers.ErrUnsupported))
	}
	ctx := stream.Context()
	ts, err := tm.OpenTerminal(ctx, drivers.TerminalRequest{Argv: open.GetArgv(), Env: open.GetEnv(), Dir: open.GetDir(),
		Rows: int(open.GetRows()), Cols: int(open.GetCols()), Term: open.GetTerm()})
	if err != nil {
		return fail(err)
	}
	defer ts.Close()
	if err := send(&pluginpb.TerminalOut{Msg: &pluginpb.TerminalOut_Opened{Opened: true}}); err != nil {
		return err
	}
	// The output, as it comes, until the session's end.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, streamChunk)
		for {
			n, err := ts.Read(buf)
			if n > 0 && send(&pluginpb.TerminalOut{Msg: &pluginpb.TerminalOut_Output{Output: append([]byte(nil), buf[:n]...)}}) != nil {
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// The host's messages; close (or the host's end) closes the session.
	go func() {
		defer ts.Close()
		for {
			in, err := stream.Recv()
			if err != nil {
				return
			}
			switch m := in.GetMsg().(type) {
			case *pluginpb.TerminalIn_Input:
				if _, err := ts.Write(m.Input); err != nil {
					return
				}
			case *pluginpb.TerminalIn_Resize:
				err := ts.Resize(ctx, int(m.Resize.GetRows()), int(m.Resize.GetCols()))
				if send(&pluginpb.TerminalOut{Msg: &pluginpb.TerminalOut_ResizeAck{ResizeAck: &pluginpb.ErrorReply{Error: errorToWire(err)}}}) != nil {
					return
				}
			case *pluginpb.TerminalIn_Close:
				return
			}
		}
	}()
	res, err := ts.Wait(ctx)
	<-outDone // the output is all sent before the exit
	exit := &pluginpb.ExecReply{Error: errorToWire(err)}
	if res != nil {
		exit.ExitCode, exit.Signal, exit.DurationNs = int64(res.ExitCode), res.Signal, int64(res.Duration)
	}
	return send(&pluginpb.TerminalOut{Msg: &pluginpb.TerminalOut_Exit{Exit: exit}})
}

// terminal gives the sandbox of a plugin that declares terminal its
// drivers.Terminal.
type terminal struct{ s *sandbox }

// OpenTerminal opens a session through the plugin. ctx bounds the
// opening; the session lasts until Close or its process's end.
func (x terminal) OpenTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	s := x.s
	if s.released.Load() {
		return nil, fmt.Errorf("sandbox %q: terminal: %w", s.id, drivers.ErrReleased)
	}
	rpc, handle, err := s.live(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel) // until opened
	st, err := rpc.Terminal(sctx)
	if err != nil {
		cancel()
		return nil, s.c.callErr(ctx, "terminal", err)
	}
	pr, pw := io.Pipe()
	t := &session{s: s, st: st, cancel: cancel, out: pr, outW: pw, done: make(chan struct{}), acks: make(chan error, 1)}
	open := &pluginpb.TerminalOpen{Handle: handle, Argv: req.Argv, Env: req.Env, Dir: req.Dir, Rows: int64(req.Rows), Cols: int64(req.Cols), Term: req.Term}
	fail := func(err error) (drivers.TerminalSession, error) {
		cancel()
		_ = pw.Close()
		return nil, err
	}
	if err := t.send(&pluginpb.TerminalIn{Msg: &pluginpb.TerminalIn_Open{Open: open}}); err != nil {
		return fail(s.c.callErr(ctx, "terminal", err))
	}
	m, err := st.Recv()
	if err != nil {
		return fail(s.c.callErr(ctx, "terminal", err))
	}
	switch m := m.GetMsg().(type) {
	case *pluginpb.TerminalOut_Opened:
	case *pluginpb.TerminalOut_Error:
		return fail(errorFromWire(s.c.name(), m.Error))
	default:
		return fail(s.c.callErr(ctx, "terminal", errors.New("protocol: the first message is not opened")))
	}
	if !stop() {
		return fail(fmt.Errorf("sandbox %q: terminal: %w", s.id, ctx.Err()))
	}
	go t.receive()
	return t, nil
}

// session is a terminal session of a plugin's sandbox.
type session struct {
	s      *sandbox
	st     pluginpb.Driver_TerminalClient
	cancel context.CancelFunc
	out    *io.PipeReader
	outW   *io.PipeWriter
	done   chan struct{} // closed when the exit (or the stream's end) is received
	res    *drivers.Result
	err    error

	sendMu sync.Mutex
	ackMu  sync.Mutex
	acks   chan error
	closed sync.Once
}

func (t *session) send(m *pluginpb.TerminalIn) error {
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	return t.st.Send(m)
}

// receive writes the output to the pipe Read reads, hands resize acks
// over and records the exit.
func (t *session) receive() {
	defer close(t.done)
	defer t.outW.Close()
	for {
		m, err := t.st.Recv()
		if err != nil {
			t.err = t.s.c.callErr(context.Background(), "terminal", err)
			if errors.Is(err, io.EOF) {
				t.err = t.s.c.callErr(context.Background(), "terminal", errors.New("protocol: the stream ended without an exit"))
			}
			return
		}
		switch m := m.GetMsg().(type) {
		case *pluginpb.TerminalOut_Output:
			if _, err := t.outW.Write(m.Output); err != nil {
				// Read's side is closed: keep receiving for the exit.
				continue
			}
		case *pluginpb.TerminalOut_ResizeAck:
			select {
			case t.acks <- errorFromWire(t.s.c.name(), m.ResizeAck.GetError()):
			default:
			}
		case *pluginpb.TerminalOut_Exit:
			if err := errorFromWire(t.s.c.name(), m.Exit.GetError()); err != nil {
				t.err = err
				return
			}
			t.res = &drivers.Result{ExitCode: int(m.Exit.GetExitCode()), Signal: m.Exit.GetSignal(), Duration: time.Duration(m.Exit.GetDurationNs())}
			return
		}
	}
}

// Read returns the terminal's output, io.EOF once the session ended.
func (t *session) Read(p []byte) (int, error) { return t.out.Read(p) }

// Write sends keystrokes.
func (t *session) Write(p []byte) (int, error) {
	select {
	case <-t.done:
		return 0, io.ErrClosedPipe
	default:
	}
	for rest := p; len(rest) > 0; {
		n := min(len(rest), streamChunk)
		if err := t.send(&pluginpb.TerminalIn{Msg: &pluginpb.TerminalIn_Input{Input: append([]byte(nil), rest[:n]...)}}); err != nil {
			return 0, t.s.c.callErr(context.Background(), "terminal input", err)
		}
		rest = rest[n:]
	}
	return len(p), nil
}

// Resize changes the window size through the plugin.
func (t *session) Resize(ctx context.Context, rows, cols int) error {
	t.ackMu.Lock()
	defer t.ackMu.Unlock()
	if err := t.send(&pluginpb.TerminalIn{Msg: &pluginpb.TerminalIn_Resize{Resize: &pluginpb.WindowSize{Rows: int64(rows), Cols: int64(cols)}}}); err != nil {
		return t.s.c.callErr(ctx, "resize", err)
	}
	select {
	case err := <-t.acks:
		return err
	case <-t.done:
		return fmt.Errorf("sandbox %q: resize: the session ended: %w", t.s.id, io.ErrClosedPipe)
	case <-ctx.Done():
		return fmt.Errorf("sandbox %q: resize: %w", t.s.id, ctx.Err())
	}
}

// Wait waits for the session's process, honouring ctx (the session stays
// open when ctx ends first).
func (t *session) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, t.done); err != nil {
		return nil, fmt.Errorf("sandbox %q: terminal wait: %w", t.s.id, err)
	}
	return t.res, t.err
}

// Close ends the session and the processes behind it.
func (t *session) Close() error {
	t.closed.Do(func() {
		_ = t.send(&pluginpb.TerminalIn{Msg: &pluginpb.TerminalIn_Close{Close: true}})
		select {
		case <-t.done:
		case <-time.After(10 * time.Second):
		}
		t.cancel()
		_ = t.out.Close()
	})
	return nil
}
