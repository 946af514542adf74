package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// capabilities the runner offers in its hello.
var capabilities = []prpwire.Capability{prpwire.CapTasks, prpwire.CapStopProof, prpwire.CapStdin, prpwire.CapSecrets, prpwire.CapBinaryOutput}

// welcomeTimeout bounds the wait for the welcome after the hello.
const welcomeTimeout = 30 * time.Second

// credentialsFor returns valid credentials, exchanging the ticket if the
// runner holds none yet (or only expired ones).
func (r *Runner) credentialsFor(ctx context.Context) (credentials, error) {
	r.mu.Lock()
	c, have := r.cred, r.haveCred
	r.mu.Unlock()
	if have && time.Now().Before(c.ExpiresAt) {
		return c, nil
	}
	if r.opts.Ticket == "" {
		return credentials{}, permanent{fmt.Errorf("%w: token_expired: the connection token expired and no ticket is left", ErrRefused)}
	}
	c, err := exchange(ctx, r.opts.HTTPClient, r.base, r.opts.Lease, r.opts.Ticket)
	var p permanent
	if err == nil || errors.As(err, &p) {
		r.opts.Ticket = "" // one use, whatever the answer
	}
	if err != nil {
		return credentials{}, err
	}
	r.mu.Lock()
	r.cred, r.haveCred = c, true
	r.mu.Unlock()
	return c, nil
}

// session runs one connection: dial, hello, welcome, then one reader (this
// goroutine), one writer and one heartbeat goroutine until the connection
// ends. welcomed reports whether a welcome arrived.
func (r *Runner) session(ctx context.Context) (welcomed bool, _ error) {
	cred, err := r.credentialsFor(ctx)
	if err != nil {
		return false, err
	}
	url := r.base + prpwire.ConnectPath
	conn, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient:   &http.Client{Transport: r.wsTransport},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + cred.Token}},
		Subprotocols: []string{prpwire.Subprotocol},
	})
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, prpwire.MaxExchangeBody))
			return false, permanent{fmt.Errorf("%w: connect at %s: HTTP %d: %s", ErrRefused, url, resp.StatusCode, refusal(b))}
		}
		if resp != nil && resp.Body != nil {
			// A passing refusal (503 at_capacity: the controller's
			// admission control, or closed): its code goes to the log,
			// and the runner retries with its backoff.
			b, _ := io.ReadAll(io.LimitReader(resp.Body, prpwire.MaxExchangeBody))
			if why := refusal(b); why != "" {
				return false, fmt.Errorf("runner: connect at %s: HTTP %d: %s (retrying)", url, resp.StatusCode, why)
			}
		}
		return false, fmt.Errorf("runner: connect at %s: %w", url, err)
	}
	conn.SetReadLimit(prpwire.DefaultMaxFrame)
	defer conn.CloseNow()
	if conn.Subprotocol() != prpwire.Subprotocol {
		conn.Close(prpwire.CloseSubprotocol, "subprotocol "+prpwire.Subprotocol+" required")
		return false, permanent{fmt.Errorf("runner: connect at %s: the controller did not negotiate %s", url, prpwire.Subprotocol)}
	}
	w, err := r.handshake(ctx, conn, cred)
	if err != nil {
		return false, err
	}
	conn.SetReadLimit(int64(w.MaxFrame))
	if err := r.out.Ack(w.EventAck); err != nil {
		conn.Close(prpwire.CloseProtocolError, "event ack beyond the last event")
		return true, err
	}
	r.out.setLimit(min(r.opts.MaxUnackedBytes, w.MaxUnackedBytes))
	r.mu.Lock()
	r.welcome, r.welcomed, r.connected = w, true, true
	r.disarmOrphanTimer()
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.connected = false
		r.mu.Unlock()
	}()

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() { cancel(r.writer(sctx, conn, cred.Session, w)) })
	wg.Go(func() { cancel(r.heartbeat(sctx, conn, w)) })
	rerr := r.reader(sctx, conn, cred.Session, w)
	cancel(rerr)
	conn.CloseNow()
	wg.Wait()
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return true, cause
	}
	return true, rerr
}

// handshake sends the hello and reads and checks the welcome.
func (r *Runner) handshake(ctx context.Context, conn *websocket.Conn, cred credentials) (prpwire.Welcome, error) {
	plat, err := r.opts.Platform(ctx)
	if err != nil {
		r.log.Warn("runner: platform not measured", "err", err)
	}
	oldest, next, _ := r.out.cursor()
	r.mu.Lock()
	lastCmd := r.lastQueued
	r.mu.Unlock()
	h := prpwire.Hello{MinVersion: prpwire.MinVersion, MaxVersion: prpwire.MaxVersion, RunnerVersion: r.opts.Version,
		BinarySHA256: r.opts.BinarySHA256, Platform: plat, Capabilities: capabilities,
		Resume: prpwire.Resume{LastCommandSeq: lastCmd, OldestUnackedEvent: oldest, NextEventSeq: next}}
	if err := r.send(ctx, conn, prpwire.TypeHello, "hello", cred.Session, 0, h, prpwire.DefaultMaxFrame); err != nil {
		return prpwire.Welcome{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, welcomeTimeout)
	defer cancel()
	_, b, err := conn.Read(wctx)
	if err != nil {
		if websocket.CloseStatus(err) == prpwire.CloseVersionUnsupported || websocket.CloseStatus(err) == prpwire.CloseUnauthorized {
			return prpwire.Welcome{}, permanent{fmt.Errorf("%w: %w", ErrRefused, err)}
		}
		return prpwire.Welcome{}, fmt.Errorf("runner: waiting for the welcome: %w", err)
	}
	env, err := prpwire.DecodeFrame(b, prpwire.DefaultMaxFrame)
	var w prpwire.Welcome
	if err == nil && env.Type != prpwire.TypeWelcome {
		err = fmt.Errorf("%w: got a %s before the welcome", prpwire.ErrFrame, env.Type)
	}
	if err == nil {
		err = prpwire.DecodeBody(env, &w)
	}
	if err == nil && (w.Version < prpwire.MinVersion || w.Version > prpwire.MaxVersion) {
		err = fmt.Errorf("%w: welcome chose version %d", prpwire.ErrVersionUnsupported, w.Version)
	}
	if err == nil && w.Session != cred.Session {
		err = fmt.Errorf("%w: welcome for session %q, token for %q", prpwire.ErrFrame, w.Session, cred.Session)
	}
	if err != nil {
		conn.Close(prpwire.CloseProtocolError, "bad welcome")
		return prpwire.Welcome{}, fmt.Errorf("runner: welcome: %w", err)
	}
	return w, nil
}

func (r *Runner) send(ctx context.Context, conn *websocket.Conn, t prpwire.Type, id, session string, seq uint64, body any, maxFrame int) error {
	env, err := prpwire.NewEnvelope(prpwire.MaxVersion, t, id, session, body)
	if err != nil {
		return err
	}
	env.Seq, env.Ack = seq, r.j.last()
	frame, err := prpwire.EncodeFrame(env, maxFrame)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, frame)
}

// writer is the connection's only writer of data frames: it sends the
// outbox from the welcome's ack on (replay after a reconnect, PRP-5), then
// every new event, and acks commands.
func (r *Runner) writer(ctx context.Context, conn *websocket.Conn, session string, w prpwire.Welcome) error {
	sent := w.EventAck
	ackedCmd := uint64(0)
	binaryOut := prpwire.Has(w.Capabilities, prpwire.CapBinaryOutput)
	var buf []byte // reused for every binary frame
	for {
		recs, changed := r.out.After(sent)
		for _, rec := range recs {
			ack := r.j.last()
			typ, frame, err := websocket.MessageText, []byte(nil), error(nil)
			if task, out, isOutput, oerr := rec.output(); oerr != nil {
				err = oerr
			} else if isOutput && binaryOut {
				typ = websocket.MessageBinary
				buf, err = prpwire.AppendOutputFrame(buf[:0], prpwire.OutputFrame{Version: w.Version, Session: session, Seq: rec.seq, Ack: ack, TaskID: task, Output: out}, w.MaxFrame)
				frame = buf
			} else {
				body := rec.body
				if isOutput { // a controller without binary output: JSON, data in base64
					body, err = json.Marshal(prp.Event{Kind: prp.EventOutput, TaskID: task, Output: &out})
				}
				if err == nil {
					env := prpwire.Envelope{Protocol: prpwire.Protocol, Version: w.Version, Type: prpwire.TypeEvent,
						ID: "e" + strconv.FormatUint(rec.seq, 10), Session: session, Seq: rec.seq, Ack: ack, Body: body}
					frame, err = prpwire.EncodeFrame(env, w.MaxFrame)
				}
			}
			if err != nil {
				return fmt.Errorf("runner: event %d: %w", rec.seq, err)
			}
			if err := conn.Write(ctx, typ, frame); err != nil {
				return fmt.Errorf("runner: send event %d: %w", rec.seq, err)
			}
			sent, ackedCmd = rec.seq, ack
		}
		if last := r.j.last(); last > ackedCmd {
			if err := r.send(ctx, conn, prpwire.TypeAck, "a"+strconv.FormatUint(last, 10), session, 0, nil, w.MaxFrame); err != nil {
				return fmt.Errorf("runner: send ack: %w", err)
			}
			ackedCmd = last
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-r.ackNudge:
		}
	}
}

// heartbeat pings every heartbeat interval; a ping unanswered for the
// dead-after interval ends the connection (PRP liveness).
func (r *Runner) heartbeat(ctx context.Context, conn *websocket.Conn, w prpwire.Welcome) error {
	t := time.NewTicker(w.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, w.DeadAfter)
		err := conn.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			conn.Close(prpwire.CloseDead, "no pong within dead-after")
			return fmt.Errorf("runner: controller missed heartbeats: %w", err)
		}
	}
}

// reader reads frames until the connection ends: acks go to the outbox,
// commands (checked for a contiguous seq) to the command queue, renewed
// tokens to the credentials.
func (r *Runner) reader(ctx context.Context, conn *websocket.Conn, session string, w prpwire.Welcome) error {
	r.mu.Lock()
	last := r.lastQueued
	r.mu.Unlock()
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("runner: read: %w", err)
		}
		env, err := prpwire.DecodeFrame(b, w.MaxFrame)
		if err == nil && env.Session != session {
			err = fmt.Errorf("%w: frame for session %q", prpwire.ErrFrame, env.Session)
		}
		if err != nil {
			conn.Close(prpwire.CloseProtocolError, "bad frame")
			return fmt.Errorf("runner: %w", err)
		}
		if env.Ack > 0 {
			if err := r.out.Ack(env.Ack); err != nil {
				conn.Close(prpwire.CloseProtocolError, "ack beyond the last event")
				return err
			}
		}
		switch env.Type {
		case prpwire.TypeAck:
		case prpwire.TypeCommand:
			switch prpwire.CheckSeq(last, env.Seq) {
			case prpwire.SeqGap:
				conn.Close(prpwire.CloseSequenceGap, fmt.Sprintf("command seq %d after %d", env.Seq, last))
				return fmt.Errorf("runner: command seq %d after %d: gap", env.Seq, last)
			case prpwire.SeqNext:
				last = env.Seq
				r.mu.Lock()
				r.lastQueued = last
				r.mu.Unlock()
			}
			var c prp.Command
			if err := prpwire.DecodeBody(env, &c); err != nil {
				conn.Close(prpwire.CloseProtocolError, "bad command")
				return fmt.Errorf("runner: %w", err)
			}
			r.queue.push(queued{seq: env.Seq, cmd: c})
		case prpwire.TypeSecrets:
			var sv prpwire.SecretValues
			if err := prpwire.DecodeBody(env, &sv); err != nil {
				conn.Close(prpwire.CloseProtocolError, "bad secrets frame")
				// The error names fields and lengths, never a value.
				return fmt.Errorf("runner: secrets frame: %w", err)
			}
			r.log.Debug("runner: secrets frame received", "command", sv.CommandID, "secrets", len(sv.Values), "code", sv.Code)
			r.keepSecrets(sv)
		case prpwire.TypeToken:
			var tr prpwire.TokenRenewal
			if err := prpwire.DecodeBody(env, &tr); err != nil || tr.Token == "" {
				conn.Close(prpwire.CloseProtocolError, "bad token renewal")
				return fmt.Errorf("runner: token renewal: %v", err)
			}
			r.mu.Lock()
			run := r.cred.Run
			switch {
			case tr.Run == "" || tr.Run == run:
			case strings.HasPrefix(run, prp.PoolRunPrefix) && prpwire.ValidID(tr.Run) && !strings.HasPrefix(tr.Run, prp.PoolRunPrefix):
				// A warm-pool member's runner, handed to the lease that
				// adopted the member: its commands are that run's now.
				r.cred.Run = tr.Run
			default:
				r.mu.Unlock()
				conn.Close(prpwire.CloseProtocolError, "token renewal for another run")
				return fmt.Errorf("runner: token renewal for run %q on a runner of run %q", tr.Run, run)
			}
			r.cred.Token, r.cred.ExpiresAt = tr.Token, tr.ExpiresAt // memory only
			r.mu.Unlock()
		default:
			conn.Close(prpwire.CloseProtocolError, "unexpected "+string(env.Type))
			return fmt.Errorf("runner: %w: unexpected %s", prpwire.ErrFrame, env.Type)
		}
	}
}
