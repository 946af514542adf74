package controller

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// liveConn is one welcomed runner connection.
type liveConn struct {
	c       *Controller
	ws      *websocket.Conn
	sess    Session
	claims  prpwire.Claims
	version int
	cancel  context.CancelFunc
	// conn is the connection's id in the store's claim
	// (Store.ClaimConnection).
	conn string
	// binary: output events may come in binary frames (CapBinaryOutput
	// granted).
	binary bool
	// leaseEnd is the session's lease's end as read at connect (zero:
	// none); the writer reads the lease again by then (renewal).
	leaseEnd time.Time
	// sentSeq is the highest command seq the runner may have got (its
	// resume cursor, then every command the writer sends, stored before
	// it is sent): the intake reads the journal for an event's task only
	// when it grew (accounting.started), so events of made-up tasks cost
	// the store nothing.
	sentSeq atomic.Uint64
	// pooled: the writer still holds a warm-pool member's claims (no
	// command until the adopting lease takes the session over, pool.go);
	// the journal poller wakes it every Poll to read the session again.
	pooled atomic.Bool

	// stored is the highest event seq stored (the reader's); the writer
	// acks it after Sync. storedBytes counts the output bytes stored on
	// this connection (ackPolicy).
	mu          sync.Mutex
	stored      uint64
	storedBytes int64
	// held counts the output bytes read on this connection and not yet
	// acked (its share of Controller.adm.inflight): the reader adds an
	// event's as it hands it to the intake, the writer takes off what an
	// ack covers, the connection's end the rest.
	held atomic.Int64
	// welcomeAck is the event seq the welcome acked: the writer's first
	// "acked". It is not read from stored, which the reader may have
	// advanced before the writer goroutine runs.
	welcomeAck uint64

	// The writer (startWriter), under wmu: wctx is its context (nil:
	// not started); wrunning, a run is under way; wagain, it was woken
	// during that run; wstopped, it is over; wtimer wakes it at its next
	// deadline. wst is its state, which only a run uses.
	wmu                        sync.Mutex
	wctx                       context.Context
	wrunning, wagain, wstopped bool
	wtimer                     *time.Timer
	wwg                        sync.WaitGroup
	wst                        writerState
}

func (c *Controller) connect(w http.ResponseWriter, r *http.Request) {
	// Authenticate before Accept (PRP-2): a bad token is a 401, never an
	// upgrade.
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: prpwire.CodeTokenMissing, Message: "an Authorization: Bearer token is required"})
		return
	}
	claims, err := prpwire.Verify(c.signer, tok, time.Now())
	if err != nil {
		writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: prpwire.CodeOf(err), Message: err.Error()})
		return
	}
	sess, err := c.o.Store.GetSession(r.Context(), claims.Session)
	if err != nil || sess.Lease != claims.Lease || sess.Run != claims.Run && !handedOverFrom(sess, claims) || sess.Scope != claims.Scope {
		c.log.Warn("controller: connect: no session for the token", "session", claims.Session, "err", err)
		writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: prpwire.CodeSessionUnknown, Message: "no session " + claims.Session})
		return
	}
	leaseEnd, ok := c.connectLease(w, r, sess)
	if !ok {
		return
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		writeJSON(w, http.StatusServiceUnavailable, prpwire.ErrorResponse{Code: prpwire.CodeClosed, Message: "the controller is closed"})
		return
	}
	// Admission control: past a ceiling the runner is refused for now
	// (503, at_capacity) before the store's claim, and retries.
	unadmit, ok := c.admitConn(w, sess.ID)
	if !ok {
		return
	}
	conn, ok := c.claimConnection(w, r, sess.ID)
	if !ok {
		unadmit()
		return
	}
	release := sync.OnceFunc(func() { c.releaseConnection(sess.ID, conn) })
	ws, err := websocket.Accept(connBufs{w}, r, &websocket.AcceptOptions{Subprotocols: []string{prpwire.Subprotocol}})
	if err != nil {
		release()
		unadmit()
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	c.runConn(ctx, cancel, ws, sess, claims, conn, leaseEnd, release, func() {
		ws.CloseNow()
		cancel()
		release()
		unadmit()
	})
}

// runConn sets up a connection of session sess upgraded to a WebSocket
// (hello, welcome, writer, heartbeat, accounting) and returns; release
// drops its claim, end ends it. Its reader runs on in a goroutine of its
// own, which ends it when the runner goes, and the handler returns: the
// HTTP server's state of the connection (its 4 KiB read and write
// buffers, which connBufs replaced with smaller ones, the request, the
// response) is then garbage, not held for as long as the runner stays
// connected, and the goroutine that holds an idle connection starts with
// a stack its store calls did not grow (issue 55). A setup that fails
// ends the connection here.
func (c *Controller) runConn(ctx context.Context, cancel context.CancelFunc, ws *websocket.Conn, sess Session, claims prpwire.Claims, conn string, leaseEnd time.Time, release, end func()) {
	ws.SetReadLimit(int64(c.limits.MaxFrame))
	if ws.Subprotocol() != prpwire.Subprotocol {
		ws.Close(prpwire.CloseSubprotocol, "subprotocol "+prpwire.Subprotocol+" required")
		end()
		return
	}
	lc, h, err := c.handshake(ctx, ws, sess, claims)
	if err != nil {
		c.log.Info("controller: handshake", "session", sess.ID, "err", err)
		end()
		return
	}
	lc.cancel, lc.conn, lc.leaseEnd = cancel, conn, leaseEnd
	lc.sentSeq.Store(h.Resume.LastCommandSeq)
	lc.pooled.Store(claims.Company == authz.InstanceCompany)
	c.mu.Lock()
	c.live[sess.ID] = lc
	c.hellos[sess.ID] = h
	if !c.polling {
		c.polling = true
		go c.pollJournal()
	}
	c.mu.Unlock()
	c.notify(sess.ID)
	lc.startWriter(ctx, h.Resume.LastCommandSeq)
	stopHeartbeat := lc.heartbeat(ctx)
	finish := func(err error) {
		if ctx.Err() == nil {
			c.log.Info("controller: reader", "session", sess.ID, "err", err)
		}
		cancel()
		ws.CloseNow()
		stopHeartbeat()
		lc.stopWriter()
		// What this connection read and never acked is no longer held
		// here: the runner sends it again on its next connection.
		c.adm.inflight.Add(-lc.held.Swap(0))
		// The claim goes first: once Connected reports false, a new
		// connection of the session is not refused for this one.
		release()
		c.mu.Lock()
		if c.live[sess.ID] == lc {
			delete(c.live, sess.ID)
		}
		c.mu.Unlock()
		c.notify(sess.ID)
		c.closeIfLeaseOver(sess.ID)
		end()
	}
	acct, err := c.newAccounting(ctx, lc.sess, lc.sentSeq.Load)
	if err != nil {
		ws.Close(websocket.StatusInternalError, "store unavailable")
		finish(err)
		return
	}
	go func() { finish(lc.reader(ctx, acct)) }()
}

// connBufSize is the size of a runner connection's read buffer and of
// its write buffer (connBufs): the protocol's frames but output (acks,
// commands, events' metadata) fit, and a larger frame is read into the
// reader's pooled frame buffer (read) or written past the buffer, with a
// system call more. net/http's 4 KiB each were 8 KiB of every idle
// connection (issue 55).
const connBufSize = 1 << 10

// connBufs is the ResponseWriter the WebSocket library hijacks a runner's
// connection from: it hands it buffers of connBufSize instead of the HTTP
// server's, with the bytes the server had read past the request (if any)
// in the new read buffer.
type connBufs struct{ http.ResponseWriter }

// Hijack implements http.Hijacker.
func (w connBufs) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	var rd io.Reader = nc
	n := brw.Reader.Buffered()
	if n > 0 {
		b, _ := brw.Reader.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(b)), nc)
	}
	br := bufio.NewReaderSize(rd, max(connBufSize, n))
	if n > 0 {
		// Buffered, as the library expects them (it reads what is
		// buffered first, then the connection).
		if _, err := br.Peek(n); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	return nc, bufio.NewReadWriter(br, bufio.NewWriterSize(nc, connBufSize)), nil
}

// closeIfLeaseOver closes this process's ingress server of the lease of
// session when that lease is over (sessionLease: errLeaseOver), once a
// connection of the session ended. The lease manager's LeaseEnded closes
// it only in the process whose manager ended the lease: a warm-pool
// member retired, or the lease that adopted it released, on another
// replica would otherwise leave the ingress served here until Close. A
// failed read leaves it (the next connection's end tries again).
func (c *Controller) closeIfLeaseOver(session string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.limits.DeadAfter)
	defer cancel()
	s, err := c.o.Store.GetSession(ctx, session)
	if err != nil {
		return
	}
	if _, err := c.sessionLease(ctx, s, time.Now()); !errors.Is(err, errLeaseOver) {
		return
	}
	c.mu.Lock()
	a := c.attached[s.Lease]
	if a != nil {
		delete(c.attached, s.Lease)
	}
	c.mu.Unlock()
	if a != nil {
		c.log.Info("controller: the lease is over: its ingress is closed", "lease", s.Lease, "session", s.ID)
		go a.close()
	}
}

// claimConnection claims sess's one live connection in the store (on any
// replica) before the upgrade and returns the connection's id. A session
// whose live connection is another's is refused (HTTP 409,
// session_connected): a second connection never replaces the first, so a
// task that got hold of its runner's token could not take over the
// session. The claim lasts DeadAfter and the heartbeat renews it; a dead
// connection's claim ends within DeadAfter, so a runner whose connection
// dropped reconnects after that at the latest.
func (c *Controller) claimConnection(w http.ResponseWriter, r *http.Request, session string) (string, bool) {
	conn, err := prp.NewID("c")
	if err == nil {
		now := time.Now()
		var ok bool
		if ok, err = c.o.Store.ClaimConnection(r.Context(), session, conn, now.Add(c.limits.DeadAfter), now); err == nil && !ok {
			writeJSON(w, http.StatusConflict, prpwire.ErrorResponse{Code: prpwire.CodeSessionConnected, Message: "session " + session + " is connected already"})
			return "", false
		}
	}
	if err != nil {
		c.log.Error("controller: connect: claim the connection", "session", session, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, prpwire.ErrorResponse{Code: prpwire.CodeStoreUnavailable, Message: "the store is unavailable"})
		return "", false
	}
	return conn, true
}

// releaseConnection drops the claim of connection conn of session.
func (c *Controller) releaseConnection(session, conn string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.limits.DeadAfter)
	defer cancel()
	if err := c.o.Store.ReleaseConnection(ctx, session, conn); err != nil {
		c.log.Warn("controller: release the connection", "session", session, "err", err)
	}
}

// handshake reads the hello and sends the welcome (PRP-3).
func (c *Controller) handshake(ctx context.Context, ws *websocket.Conn, sess Session, claims prpwire.Claims) (*liveConn, prpwire.Hello, error) {
	hctx, cancel := context.WithTimeout(ctx, c.limits.DeadAfter)
	_, b, err := ws.Read(hctx)
	cancel()
	if err != nil {
		return nil, prpwire.Hello{}, fmt.Errorf("read hello: %w", err)
	}
	env, err := prpwire.DecodeFrame(b, c.limits.MaxFrame)
	var h prpwire.Hello
	if err == nil && env.Type != prpwire.TypeHello {
		err = fmt.Errorf("%w: first frame is a %s, want a hello", prpwire.ErrFrame, env.Type)
	}
	if err == nil {
		err = prpwire.DecodeBody(env, &h)
	}
	if err != nil {
		ws.Close(prpwire.CloseProtocolError, string(prpwire.CodeOf(err)))
		return nil, prpwire.Hello{}, err
	}
	v, err := prpwire.Negotiate(h.MinVersion, h.MaxVersion, prpwire.MinVersion, prpwire.MaxVersion)
	if err != nil {
		ws.Close(prpwire.CloseVersionUnsupported, string(prpwire.CodeOf(err)))
		return nil, h, err
	}
	ack, err := c.o.Store.LastEventSeq(ctx, sess.ID)
	if err == nil {
		// Events the runner no longer has and the store never got are
		// recorded as lost, and the session's commands fail loudly.
		ack, err = c.lostEvents(ctx, sess, h, ack)
	}
	if err != nil {
		ws.Close(websocket.StatusInternalError, "store unavailable")
		return nil, h, err
	}
	wel := c.limits
	wel.Version, wel.Session, wel.EventAck, wel.NextCommandSeq = v, sess.ID, ack, h.Resume.LastCommandSeq+1
	wel.TokenExpiry = claims.ExpiresAt
	// A probe identity is granted nothing (PRP-8).
	wel.Capabilities = []prpwire.Capability{}
	if sess.Scope == prp.ScopeTask {
		wel.Capabilities = prpwire.GrantCapabilities(h.Capabilities, c.grant)
	}
	lc := &liveConn{c: c, ws: ws, sess: sess, claims: claims, version: v, stored: ack, welcomeAck: ack,
		binary: prpwire.Has(wel.Capabilities, prpwire.CapBinaryOutput)}
	if err := lc.send(ctx, prpwire.TypeWelcome, 0, ack, wel); err != nil {
		return nil, h, fmt.Errorf("send welcome: %w", err)
	}
	return lc, h, nil
}

// send writes one frame; only the writer goroutine calls it after the
// welcome.
func (lc *liveConn) send(ctx context.Context, t prpwire.Type, seq, ack uint64, body any) error {
	id, err := prp.NewID("m")
	if err != nil {
		return err
	}
	env, err := prpwire.NewEnvelope(lc.version, t, id, lc.sess.ID, body)
	if err != nil {
		return err
	}
	env.Seq, env.Ack = seq, ack
	b, err := prpwire.EncodeFrame(env, lc.c.limits.MaxFrame)
	if err != nil {
		return err
	}
	return lc.ws.Write(ctx, websocket.MessageText, b)
}

// pollJournal is the controller's one journal poller, which runs while it
// has live connections: once per Poll it asks the store, in one read for
// all of them (Store.SessionsWithCommandsAfter), which sessions have
// commands their writer has not sent, and wakes those writers. Commands
// journaled here wake their writer at once (dispatch's notifySession);
// this is how those another replica journals reach a connection of this
// one, within about a Poll. A writer reads its journal only when woken,
// so an idle connection costs the store nothing of its own: each
// connection's writer read its journal every Poll, 20,000 reads a second
// for 10,000 idle sessions, and new leases waited behind them on SQLite
// (issue 55). The writers of warm-pool members are woken every Poll:
// they read their session for its hand-over, which another replica may
// have made.
func (c *Controller) pollJournal() {
	t := time.NewTicker(c.o.Poll)
	defer t.Stop()
	var cursors []CommandCursor
	for {
		select {
		case <-c.stop.Done():
		case <-t.C:
		}
		cursors = cursors[:0]
		c.mu.Lock()
		if c.closed || len(c.live) == 0 {
			c.polling = false
			c.mu.Unlock()
			return
		}
		for id, lc := range c.live {
			if lc.pooled.Load() {
				lc.wakeWriter()
				continue
			}
			// A cursor is never ahead of what the writer read (sentSeq
			// is stored before each command is sent), and a wakeup
			// during a writer's run has it run again (wakeWriter), which
			// reads the journal again: a command committed before this
			// read is sent, at worst after a spurious wakeup.
			cursors = append(cursors, CommandCursor{Session: id, Sent: lc.sentSeq.Load()})
		}
		c.mu.Unlock()
		if len(cursors) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(c.stop, c.limits.DeadAfter)
		ids, err := c.o.Store.SessionsWithCommandsAfter(ctx, cursors)
		cancel()
		if err != nil {
			if c.stop.Err() == nil {
				c.log.Warn("controller: read which sessions have commands to send; retrying at the next poll", "sessions", len(cursors), "err", err)
			}
			continue
		}
		c.mu.Lock()
		for _, id := range ids {
			if lc := c.live[id]; lc != nil {
				lc.wakeWriter()
			}
		}
		c.mu.Unlock()
	}
}

// writerState is what the connection's writer keeps from one run to the
// next (write).
type writerState struct {
	// sent is the last command seq sent; acked the last event seq acked.
	sent, acked uint64
	// The output bytes acked so far on this connection, and when the
	// writer first saw stored events it has not acked (ackPolicy).
	ackedBytes   int64
	unackedSince time.Time
	// The session and claims as the runner holds them: a warm-pool
	// member's change once, when the adopting lease takes it over.
	sess            Session
	claims          prpwire.Claims
	expiry, renewAt time.Time
}

// startWriter starts the connection's writer (write) with the runner's
// command cursor sent: a first run now, and one more for every wakeup
// (wakeWriter) and its own deadlines, until stopWriter. Between runs the
// writer holds no goroutine (issue 55: an idle connection's writer only
// slept, on a stack its last journal read had grown); a run that fails
// ends the connection.
func (lc *liveConn) startWriter(ctx context.Context, sent uint64) {
	st := writerState{sent: sent, acked: lc.welcomeAck, sess: lc.sess, claims: lc.claims, expiry: lc.claims.ExpiresAt}
	st.renewAt = st.expiry.Add(-lc.c.o.tokenTTL / 2)
	if !lc.leaseEnd.IsZero() && lc.leaseEnd.Before(st.renewAt) {
		st.renewAt = lc.leaseEnd
	}
	lc.wmu.Lock()
	lc.wst, lc.wctx = st, ctx
	lc.wmu.Unlock()
	lc.wakeWriter()
}

// wakeWriter has the writer run (again): at once when it does not run,
// after its run under way otherwise, which then reads the journal again.
func (lc *liveConn) wakeWriter() {
	lc.wmu.Lock()
	defer lc.wmu.Unlock()
	if lc.wctx == nil || lc.wstopped {
		// Not started yet (its first run reads everything) or over.
		return
	}
	if lc.wrunning {
		lc.wagain = true
		return
	}
	lc.wrunning = true
	lc.wwg.Go(lc.writeRun)
}

// stopWriter ends the writer and waits for a run under way, which the
// connection's context's end cuts short.
func (lc *liveConn) stopWriter() {
	lc.wmu.Lock()
	lc.wstopped = true
	if lc.wtimer != nil {
		lc.wtimer.Stop()
	}
	lc.wmu.Unlock()
	lc.wwg.Wait()
}

// writeRun is one run of the writer: write until no wakeup came during
// it, then its next deadline (if any) is set and it ends.
func (lc *liveConn) writeRun() {
	ctx := lc.wctx // set before the first run, never changed
	for {
		lc.wmu.Lock()
		lc.wagain = false
		lc.wmu.Unlock()
		next, err := lc.write(ctx, &lc.wst)
		lc.wmu.Lock()
		if err != nil {
			lc.wrunning, lc.wstopped = false, true
			lc.wmu.Unlock()
			if ctx.Err() == nil {
				lc.c.log.Info("controller: writer", "session", lc.sess.ID, "err", err)
			}
			lc.cancel()
			lc.ws.CloseNow()
			return
		}
		if lc.wagain && !lc.wstopped {
			lc.wmu.Unlock()
			continue
		}
		lc.wrunning = false
		if next >= 0 && !lc.wstopped {
			if lc.wtimer == nil {
				lc.wtimer = time.AfterFunc(next, lc.wakeWriter)
			} else {
				lc.wtimer.Reset(next)
			}
		}
		lc.wmu.Unlock()
		return
	}
}

// write is the connection's one writer, in runs: commands in seq order
// from the journal (from the runner's cursor on), acks after the sink's
// Sync, and token renewals at half life. It returns when it has nothing
// more to do, with its next deadline (a renewal, an ack batch; < 0:
// none). It runs again when it is woken (wakeWriter: dispatch's
// notifySession for a command journaled here, the journal poller for one
// journaled by another replica, the intake for an ack) or at that
// deadline: a wakeup during a run has it run again, so a wakeup between
// the journal's read and the run's end is kept, never lost.
func (lc *liveConn) write(ctx context.Context, st *writerState) (time.Duration, error) {
	c := lc.c
	sent, acked, ackedBytes, unackedSince := st.sent, st.acked, st.ackedBytes, st.unackedSince
	sess, claims, expiry, renewAt := st.sess, st.claims, st.expiry, st.renewAt
	defer func() {
		st.sent, st.acked, st.ackedBytes, st.unackedSince = sent, acked, ackedBytes, unackedSince
		st.sess, st.claims, st.expiry, st.renewAt = sess, claims, expiry, renewAt
	}()
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var cmds []CommandRecord
		if claims.Company == authz.InstanceCompany {
			// A warm-pool member's runner gets no command: first its
			// token with the adopting lease's claims (pool.go).
			ns, cl, ok, err := lc.handedOver(ctx, sess, acked)
			if errors.Is(err, errLeaseOver) {
				lc.ws.Close(prpwire.CloseUnauthorized, "lease ended")
			}
			if err != nil {
				return 0, err
			}
			if ok {
				sess, claims, expiry = ns, cl, cl.ExpiresAt
				renewAt = expiry.Add(-c.o.tokenTTL / 2)
				lc.pooled.Store(false)
			}
		}
		if claims.Company != authz.InstanceCompany {
			var err error
			if cmds, err = c.o.Store.CommandsAfter(ctx, sess.ID, sent, 64); err != nil {
				return 0, err
			}
		}
		for _, r := range cmds {
			// Secret values go right before their command, in their own
			// frame, resolved now and never stored (PRP "secrets in
			// commands").
			sv, ok, err := lc.secretsFor(ctx, sess, r)
			if err != nil {
				return 0, err
			}
			if ok {
				if err := lc.send(ctx, prpwire.TypeSecrets, 0, acked, sv); err != nil {
					return 0, err
				}
				c.secretFrames.Add(1)
			}
			lc.sentSeq.Store(r.Seq)
			if err := lc.send(ctx, prpwire.TypeCommand, r.Seq, acked, r.Command); err != nil {
				return 0, err
			}
			sent = r.Seq
		}
		lc.mu.Lock()
		stored, storedBytes := lc.stored, lc.storedBytes
		lc.mu.Unlock()
		var ackIn time.Duration // > 0: the stored events are acked then
		if stored > acked {
			now := time.Now()
			if unackedSince.IsZero() {
				unackedSince = now
			}
			ackIn = ackPolicy(storedBytes-ackedBytes, now.Sub(unackedSince), int64(c.limits.MaxUnackedBytes))
		}
		if stored > acked && ackIn == 0 {
			// Durable before the ack (PRP-5): the metadata is in the
			// store already; the bytes are once the sink synced.
			if err := c.sink.Sync(ctx, lc.sess.ID); err != nil {
				return 0, err
			}
			if err := lc.send(ctx, prpwire.TypeAck, 0, stored, nil); err != nil {
				return 0, err
			}
			lc.release(storedBytes - ackedBytes)
			acked, ackedBytes, unackedSince = stored, storedBytes, time.Time{}
		}
		if lc.sess.Scope == prp.ScopeTask && !time.Now().Before(renewAt) {
			// Renewed only while the lease is active, never past its end
			// (renewal, leases.go).
			tok, cl, next, err := lc.renewal(ctx, sess, claims, expiry)
			if errors.Is(err, errLeaseOver) {
				lc.ws.Close(prpwire.CloseUnauthorized, "lease ended")
			}
			if err != nil {
				return 0, err
			}
			if tok != "" {
				if err := lc.send(ctx, prpwire.TypeToken, 0, acked, prpwire.TokenRenewal{Token: tok, ExpiresAt: cl.ExpiresAt}); err != nil {
					return 0, err
				}
				claims, expiry = cl, cl.ExpiresAt
			}
			renewAt = next
		}
		if len(cmds) == 64 {
			continue
		}
		// Commands other replicas journaled come with the journal
		// poller's wakeup (pollJournal); a task session also wakes for its
		// renewal (a probe token is never renewed: its writer must not
		// spin on a renewal time long past), and stored events for their
		// ack batch.
		next := time.Duration(-1)
		if lc.sess.Scope == prp.ScopeTask {
			next = max(time.Until(renewAt), time.Millisecond)
		}
		if ackIn > 0 && (next < 0 || ackIn < next) {
			next = ackIn
		}
		return next, nil
	}
}

// The writer acks stored events in batches (ackPolicy): at most ackDelay
// after it saw the first of them stored, or at once when they hold an
// eighth of the runner's window (the welcome's max_unacked_bytes) of
// output. Every ack costs an fsync of the session's chunk file here and a
// frame and an ack record on the runner: acked as they were stored, a
// 1 GiB stream made hundreds of each a second, two stored chunks per
// sync (issue 55). The runner's window stays open: it can send the rest
// of its window while a batch waits, and no ack waits longer than
// ackDelay.
const ackDelay = 10 * time.Millisecond

// ackPolicy returns how long the writer waits before it syncs and acks
// stored events that hold bytes of output and were first seen stored age
// ago (0: now), window being the welcome's max_unacked_bytes.
func ackPolicy(bytes int64, age time.Duration, window int64) time.Duration {
	if bytes >= window/8 || age >= ackDelay {
		return 0
	}
	return ackDelay - age
}

// heartbeat pings every heartbeat interval; a peer that does not answer
// within dead-after is dropped (and only that connection). Between pings
// it holds no goroutine: a timer starts one for each ping, which ends
// with it (issue 55: a goroutine each that only slept was a quarter of an
// idle connection's memory). stop ends the heartbeat and waits for a ping
// under way, which ctx's end cuts short.
func (lc *liveConn) heartbeat(ctx context.Context) (stop func()) {
	every := lc.c.limits.Heartbeat
	var (
		mu      sync.Mutex
		stopped bool
		wg      sync.WaitGroup
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		wg.Add(1)
		mu.Unlock()
		defer wg.Done()
		start := time.Now()
		if !lc.ping(ctx) {
			return
		}
		// The next ping an interval after this one began, as a ticker
		// would (at once if this one took longer).
		mu.Lock()
		if !stopped {
			t.Reset(max(every-time.Since(start), 0))
		}
		mu.Unlock()
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		wg.Wait()
	}
}

// ping pings the runner once and renews the connection's claim; it
// reports false when the connection is over (dropped here when the runner
// did not answer within dead-after or the claim is another's).
func (lc *liveConn) ping(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, lc.c.limits.DeadAfter)
	defer cancel()
	err := lc.ws.Ping(pctx)
	if err == nil {
		// The peer answered: its claim lasts another DeadAfter,
		// renewed with those of the other connections (renewClaim).
		var ok bool
		if ok, err = lc.c.renewClaim(pctx, lc); err == nil && !ok {
			err = errors.New("another connection claimed the session")
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			lc.c.log.Info("controller: runner missed its heartbeats", "session", lc.sess.ID, "err", err)
			lc.ws.Close(prpwire.CloseDead, "heartbeat missed")
			lc.cancel()
		}
		return false
	}
	return true
}

// claimRenewal is a connection's claim waiting for renewClaims, and where
// its outcome goes.
type claimRenewal struct {
	claim ConnectionClaim
	ctx   context.Context   // the heartbeat's
	done  chan claimOutcome // buffered: renewClaims never waits
	// Under Controller.claimMu: taken, in a batch being written; gone,
	// given up before it was taken.
	taken, gone bool
}

type claimOutcome struct {
	held bool
	err  error
}

// claimBatchDelay is the longest a connection's claim waits for those of
// others to be renewed with it (renewClaims), at most a quarter of the
// heartbeat interval.
const claimBatchDelay = time.Second

// renewClaim renews lc's claim on its session for another DeadAfter
// (Store.ClaimConnection's condition) with the claims of every other
// connection whose heartbeat was answered meanwhile, and reports whether
// the claim is still lc's. When it returns, no write of the claim is
// under way: the connection's end releases the claim after it, and a
// renewal written after the release would refuse the runner's next
// connection (409) until it expired.
func (c *Controller) renewClaim(ctx context.Context, lc *liveConn) (bool, error) {
	r := &claimRenewal{claim: ConnectionClaim{Session: lc.sess.ID, Conn: lc.conn}, ctx: ctx, done: make(chan claimOutcome, 1)}
	c.claimMu.Lock()
	c.claims = append(c.claims, r)
	if !c.renewing {
		c.renewing = true
		go c.renewClaims()
	}
	c.claimMu.Unlock()
	select {
	case o := <-r.done:
		return o.held, o.err
	case <-ctx.Done():
	}
	c.claimMu.Lock()
	if !r.taken {
		r.gone = true
		c.claimMu.Unlock()
		return false, ctx.Err()
	}
	c.claimMu.Unlock()
	// Its batch is being written, within DeadAfter (renewClaims).
	o := <-r.done
	return o.held, o.err
}

// renewClaims renews the claims that renewClaim queued, all of one
// batch in one store call (Store.RenewConnections), while there are
// some: each connection's heartbeat renewed its own claim, a write per
// connection and heartbeat interval, a thousand a second with 10,000
// sessions, which new leases waited behind on SQLite (issue 55). A batch
// is what came within claimBatchDelay (at most a quarter of Heartbeat)
// of its first claim; the claim lasts DeadAfter, three heartbeat
// intervals, from its write. A batch whose write failed is tried again
// with the next one, for the connections whose heartbeat still waits:
// one failed write does not drop every connection of its batch.
func (c *Controller) renewClaims() {
	delay := min(claimBatchDelay, c.limits.Heartbeat/4)
	var batch []*claimRenewal
	var claims []ConnectionClaim
	for {
		t := time.NewTimer(delay)
		select {
		case <-c.stop.Done():
		case <-t.C:
		}
		t.Stop()
		batch, claims = batch[:0], claims[:0]
		c.claimMu.Lock()
		for _, r := range c.claims {
			if !r.gone {
				r.taken = true
				batch = append(batch, r)
				claims = append(claims, r.claim)
			}
		}
		c.claims = nil
		if len(batch) == 0 {
			c.renewing = false
			c.claimMu.Unlock()
			return
		}
		c.claimMu.Unlock()
		ctx, cancel := context.WithTimeout(c.stop, c.limits.DeadAfter)
		now := time.Now()
		held, err := c.o.Store.RenewConnections(ctx, claims, now.Add(c.limits.DeadAfter), now)
		cancel()
		if err != nil && c.stop.Err() == nil {
			c.log.Warn("controller: renew the claims of live connections; retrying", "connections", len(batch), "err", err)
			c.claimMu.Lock()
			for _, r := range batch {
				if r.ctx.Err() == nil {
					r.taken = false
					c.claims = append(c.claims, r)
				} else {
					r.done <- claimOutcome{err: err}
				}
			}
			c.claimMu.Unlock()
			continue
		}
		ok := make(map[ConnectionClaim]bool, len(held))
		for _, cl := range held {
			ok[cl] = true
		}
		for _, r := range batch {
			r.done <- claimOutcome{held: ok[r.claim], err: err}
		}
	}
}

// reader is the connection's one reader: events in seq order, their
// output bytes written to the sink at once (the frame's buffer is reused),
// their metadata handed to the intake goroutine, which stores it in
// batches (every event read while the previous batch was written, at most
// maxEventBatch) before they count as stored; a gap closes the connection
// (the runner resumes from the ack).
func (lc *liveConn) reader(ctx context.Context, acct *accounting) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The records go by pointer, and the intake's batch grows as it
	// needs: an intakeItem is 184 bytes, and a channel and a batch of
	// maxEventBatch of them were 23 KiB of every connection, idle ones
	// too (issue 55).
	recs := make(chan *intakeItem, maxEventBatch)
	// The intake goroutine runs only while records flow: the reader
	// starts it with a record when none runs, and it ends once it has
	// stored every record handed over (issue 55: an idle connection holds
	// no goroutine of its own for it). One runs at a time, so the stored
	// seq only grows.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		running bool
	)
	idle := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(recs) > 0 {
			return false
		}
		running = false
		return true
	}
	startIntake := func() {
		mu.Lock()
		defer mu.Unlock()
		if running {
			return
		}
		running = true
		wg.Go(func() {
			if err := lc.intake(ctx, recs, idle); err != nil {
				cancel(err)
				if !errors.Is(err, context.Canceled) {
					lc.ws.Close(websocket.StatusInternalError, "store unavailable")
				}
			}
		})
	}
	err := lc.read(ctx, recs, startIntake, acct)
	close(recs)
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// intake stores the records the reader hands over, in batches, and then
// advances the stored seq and wakes the writer to ack. It returns once
// idle reports, with no record waiting, that it may end (the reader
// starts it again with the next record), or when recs is closed.
func (lc *liveConn) intake(ctx context.Context, recs <-chan *intakeItem, idle func() bool) error {
	var batch []intakeItem
	for {
		batch = batch[:0]
	more:
		for len(batch) < maxEventBatch {
			select {
			case r, ok := <-recs:
				if !ok {
					break more
				}
				batch = append(batch, *r)
			default:
				break more
			}
		}
		if len(batch) == 0 {
			// Nothing waits: end, unless a record came meanwhile (or recs
			// was closed with records in it: they are read first).
			if idle() {
				return nil
			}
			continue
		}
		if err := lc.c.intake(ctx, lc.sess, batch); err != nil {
			return err
		}
		var n int64
		for _, it := range batch {
			if it.keep && it.rec.Ref != nil {
				n += it.rec.Ref.Length
			}
		}
		lc.mu.Lock()
		lc.stored = batch[len(batch)-1].rec.Seq
		lc.storedBytes += n
		lc.mu.Unlock()
		lc.wakeWriter()
	}
}

// read reads frames until the connection ends, checks each event's seq
// against the last one read, and hands the events on as acct decided.
func (lc *liveConn) read(ctx context.Context, recs chan<- *intakeItem, startIntake func(), acct *accounting) error {
	lc.mu.Lock()
	last := lc.stored // the last event seq read
	lc.mu.Unlock()
	// The frame's buffer is taken from frameBufs once a frame arrives and
	// put back when the next one is awaited (the records keep nothing of
	// it): an idle connection holds none (issue 55: 64 KiB a connection
	// was most of an idle session's memory), a stream reuses one.
	var buf []byte
	var bp *[]byte
	defer func() {
		if bp != nil {
			*bp = buf[:0]
			frameBufs.Put(bp)
		}
	}()
	for {
		if bp != nil {
			*bp = buf[:0]
			frameBufs.Put(bp)
			bp = nil
		}
		typ, rd, err := lc.ws.Reader(ctx)
		if err != nil {
			return err
		}
		bp = frameBufs.Get().(*[]byte)
		if buf, err = readMessage(rd, (*bp)[:0]); err != nil {
			return err
		}
		var seq uint64
		var ev prp.Event
		if typ == websocket.MessageBinary {
			// One parse, no copy: the output bytes go from this buffer to
			// the sink.
			var f prpwire.OutputFrame
			if !lc.binary {
				err = fmt.Errorf("%w: a binary frame, but %s was not granted", prpwire.ErrFrame, prpwire.CapBinaryOutput)
			} else if f, err = prpwire.DecodeOutputFrame(buf, lc.c.limits.MaxFrame); err == nil && (f.Session != lc.sess.ID || f.Version != lc.version) {
				err = fmt.Errorf("%w: output frame for session %q version %d on session %s version %d", prpwire.ErrFrame, f.Session, f.Version, lc.sess.ID, lc.version)
			}
			if err != nil {
				lc.ws.Close(prpwire.CloseProtocolError, string(prpwire.CodeOf(err)))
				return err
			}
			seq, ev = f.Seq, f.Event()
		} else {
			env, err := prpwire.DecodeFrame(buf, lc.c.limits.MaxFrame)
			if err == nil && env.Session != lc.sess.ID {
				err = fmt.Errorf("%w: frame for session %q on session %s", prpwire.ErrFrame, env.Session, lc.sess.ID)
			}
			if err != nil {
				lc.ws.Close(prpwire.CloseProtocolError, string(prpwire.CodeOf(err)))
				return err
			}
			switch env.Type {
			case prpwire.TypeAck:
				continue
			case prpwire.TypeEvent:
			default:
				lc.ws.Close(prpwire.CloseProtocolError, "unexpected "+string(env.Type))
				return fmt.Errorf("%w: unexpected %s from a runner", prpwire.ErrFrame, env.Type)
			}
			if err := prpwire.DecodeBody(env, &ev); err != nil {
				lc.ws.Close(prpwire.CloseProtocolError, string(prpwire.CodeOf(err)))
				return err
			}
			seq = env.Seq
		}
		switch prpwire.CheckSeq(last, seq) {
		case prpwire.SeqGap:
			lc.ws.Close(prpwire.CloseSequenceGap, fmt.Sprintf("event %d after %d", seq, last))
			return fmt.Errorf("event seq %d after %d", seq, last)
		case prpwire.SeqDuplicate:
			lc.wakeWriter() // re-ack: the runner missed our ack
			continue
		}
		rec, err := acct.decide(ctx, seq, ev, time.Now().UTC())
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				lc.ws.Close(websocket.StatusInternalError, "sink unavailable")
			}
			return err
		}
		if rec.keep && rec.rec.Ref != nil {
			// Held until acked (admission control); counted as the
			// intake counts storedBytes.
			lc.held.Add(rec.rec.Ref.Length)
			lc.c.adm.inflight.Add(rec.rec.Ref.Length)
		}
		select {
		case recs <- &rec:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		startIntake()
		last = seq
	}
}

// frameBufs holds the readers' frame buffers (read).
var frameBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 64<<10)
	return &b
}}

// readMessage appends the rest of a message to buf (the connection's read
// limit bounds it) and returns it.
func readMessage(rd io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// release takes n acked output bytes off what the connection holds in
// flight.
func (lc *liveConn) release(n int64) {
	if n != 0 {
		lc.held.Add(-n)
		lc.c.adm.inflight.Add(-n)
	}
}
