package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/runner"
)

// testController is a minimal controller for the runner's tests: the ticket
// exchange, Accept with the subprotocol, the welcome, commands in seq order
// and acks of events, over a real WebSocket on loopback.
type testController struct {
	t      *testing.T
	srv    *httptest.Server
	store  prp.TicketStore
	x      *prpwire.Exchanger
	minV   int
	maxV   int
	limits prpwire.Welcome

	mu          sync.Mutex
	changed     chan struct{}
	commands    []prp.Command // commands[i] has seq i+1
	raw         []prpwire.Envelope
	events      []prp.Event // events[i] has seq i+1
	received    uint64      // highest contiguous event seq received
	acked       uint64      // highest event seq acked to the runner
	holdAcks    bool
	refuse      bool
	conn        *websocket.Conn
	conns       int
	hellos      []prpwire.Hello
	closes      []websocket.StatusCode // close statuses the runner sent
	cmdAcked    uint64
	maxUnack    int64 // the most event bytes received but not acked
	unackSize   map[uint64]int
	lastSession string
	mute        bool // when set, pings get no pong (a dead controller)
	// forged, when set, is the token the exchange hands out instead of
	// its own (one the controller does not accept).
	forged string
	// tokens are the bearer tokens of the connect attempts, in order.
	tokens []string
}

func newController(t *testing.T) *testController {
	t.Helper()
	signer, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	c := &testController{t: t, store: prpwire.NewMemoryTicketStore(), minV: prpwire.MinVersion, maxV: prpwire.MaxVersion, changed: make(chan struct{}), unackSize: map[uint64]int{}}
	c.x = &prpwire.Exchanger{Store: c.store, Signer: signer}
	c.limits = prpwire.Welcome{Heartbeat: time.Second, DeadAfter: 3 * time.Second, MaxFrame: prpwire.DefaultMaxFrame,
		MaxOutputChunk: prpwire.DefaultMaxOutputChunk, MaxUnackedBytes: prpwire.DefaultMaxUnackedBytes, OrphanGrace: time.Minute}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /prp/exchange", c.exchange)
	mux.HandleFunc("GET /prp/connect", c.connect)
	c.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		c.mu.Lock()
		if c.conn != nil {
			c.conn.CloseNow()
		}
		c.mu.Unlock()
		c.srv.Close()
	})
	return c
}

// URL is the PRP base URL for the runner.
func (c *testController) URL() string { return c.srv.URL + "/prp/" }

// ticket mints a ticket for lease-1 / run-1 of co-1 with scope.
func (c *testController) ticket(lease string, scope prp.Scope, ttl time.Duration) string {
	c.t.Helper()
	tk, err := prp.NewTicket()
	if err != nil {
		c.t.Fatal(err)
	}
	now := time.Now()
	if err := c.store.CreateTicket(context.Background(), prp.TicketRecord{Hash: tk.Hash(), Lease: lease, Run: "run-1", Company: "co-1", Scope: scope, CreatedAt: now, ExpiresAt: now.Add(ttl)}); err != nil {
		c.t.Fatal(err)
	}
	return tk.String()
}

// resumeTicket mints a resume ticket of session (lease-1 / run-1 of co-1,
// task scope), as Controller.MintResumeTicket does.
func (c *testController) resumeTicket(session string) string {
	c.t.Helper()
	tk, err := prp.NewTicket()
	if err != nil {
		c.t.Fatal(err)
	}
	now := time.Now()
	if err := c.store.CreateTicket(context.Background(), prp.TicketRecord{Hash: tk.Hash(), Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask,
		CreatedAt: now, ExpiresAt: now.Add(time.Minute), Resume: session}); err != nil {
		c.t.Fatal(err)
	}
	return tk.String()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (c *testController) exchange(w http.ResponseWriter, r *http.Request) {
	var req prpwire.ExchangeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, prpwire.MaxExchangeBody)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, prpwire.ErrorResponse{Code: "bad_request", Message: "not an exchange request"})
		return
	}
	resp, _, err := c.x.Exchange(r.Context(), req, time.Now())
	if err != nil {
		writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: prpwire.CodeOf(err), Message: err.Error()})
		return
	}
	c.mu.Lock()
	if c.forged != "" {
		resp.Token = c.forged
	}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (c *testController) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *testController) connect(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	refuse := c.refuse
	c.tokens = append(c.tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	c.mu.Unlock()
	if refuse {
		http.Error(w, "away", http.StatusServiceUnavailable)
		return
	}
	// Authenticate before Accept.
	claims, err := prpwire.Verify(c.x.Signer, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), time.Now())
	if err != nil {
		writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: prpwire.CodeOf(err), Message: err.Error()})
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{prpwire.Subprotocol},
		OnPingReceived: func(context.Context, []byte) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return !c.mute
		}})
	if err != nil {
		return
	}
	defer conn.CloseNow()
	if conn.Subprotocol() != prpwire.Subprotocol {
		conn.Close(prpwire.CloseSubprotocol, "subprotocol required")
		return
	}
	conn.SetReadLimit(int64(c.limits.MaxFrame))
	ctx := r.Context()
	_, b, err := conn.Read(ctx)
	if err != nil {
		return
	}
	env, err := prpwire.DecodeFrame(b, c.limits.MaxFrame)
	var h prpwire.Hello
	if err == nil {
		err = prpwire.DecodeBody(env, &h)
	}
	if err != nil || env.Type != prpwire.TypeHello {
		conn.Close(prpwire.CloseProtocolError, "hello expected")
		return
	}
	v, err := prpwire.Negotiate(h.MinVersion, h.MaxVersion, c.minV, c.maxV)
	c.mu.Lock()
	c.hellos = append(c.hellos, h)
	c.notify()
	c.mu.Unlock()
	if err != nil {
		conn.Close(prpwire.CloseVersionUnsupported, string(prpwire.CodeOf(err)))
		return
	}
	c.mu.Lock()
	wel := c.limits
	wel.Version, wel.Session, wel.EventAck, wel.NextCommandSeq = v, claims.Session, c.acked, h.Resume.LastCommandSeq+1
	wel.Capabilities = prpwire.GrantCapabilities(h.Capabilities, []prpwire.Capability{prpwire.CapTasks, prpwire.CapStopProof, prpwire.CapStdin})
	wel.TokenExpiry = claims.ExpiresAt
	c.received = c.acked // unacked events will be replayed
	c.conn = conn
	c.conns++
	c.lastSession = claims.Session
	c.notify()
	c.mu.Unlock()
	if err := c.send(ctx, conn, prpwire.TypeWelcome, claims.Session, 0, wel); err != nil {
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.sendCommands(sctx, conn, claims.Session, h.Resume.LastCommandSeq)
	c.readEvents(sctx, conn, claims.Session)
}

func (c *testController) send(ctx context.Context, conn *websocket.Conn, t prpwire.Type, session string, seq uint64, body any) error {
	env, err := prpwire.NewEnvelope(prpwire.MaxVersion, t, fmt.Sprintf("m%d", time.Now().UnixNano()), session, body)
	if err != nil {
		return err
	}
	env.Seq = seq
	return c.sendEnv(ctx, conn, env)
}

func (c *testController) sendEnv(ctx context.Context, conn *websocket.Conn, env prpwire.Envelope) error {
	c.mu.Lock()
	env.Ack = c.acked
	c.mu.Unlock()
	b, err := prpwire.EncodeFrame(env, 0)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

func (c *testController) sendCommands(ctx context.Context, conn *websocket.Conn, session string, sent uint64) {
	for {
		c.mu.Lock()
		cmds := append([]prp.Command(nil), c.commands[min(int(sent), len(c.commands)):]...)
		raws := c.raw // raw frames go out once, on the connection that is up
		c.raw = nil
		ch := c.changed
		c.mu.Unlock()
		for _, cmd := range cmds {
			sent++
			if err := c.send(ctx, conn, prpwire.TypeCommand, session, sent, cmd); err != nil {
				return
			}
		}
		for _, env := range raws {
			env.Session = session
			if err := c.sendEnv(ctx, conn, env); err != nil {
				return
			}
		}
		if len(raws) > 0 {
			c.mu.Lock()
			c.notify() // a test may wait for its raw frames to be out
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

func (c *testController) readEvents(ctx context.Context, conn *websocket.Conn, session string) {
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			c.mu.Lock()
			if st := websocket.CloseStatus(err); st != -1 {
				c.closes = append(c.closes, st)
			}
			if c.conn == conn {
				c.conn = nil
			}
			c.notify()
			c.mu.Unlock()
			return
		}
		env, err := prpwire.DecodeFrame(b, c.limits.MaxFrame)
		if err != nil || env.Session != session {
			c.t.Errorf("controller: bad frame from the runner: %v", err)
			conn.Close(prpwire.CloseProtocolError, "bad frame")
			return
		}
		c.mu.Lock()
		if c.conn != conn {
			// A newer connection took over; frames still buffered on this
			// one are stale.
			c.mu.Unlock()
			return
		}
		c.cmdAcked = max(c.cmdAcked, env.Ack)
		if env.Type == prpwire.TypeEvent {
			switch prpwire.CheckSeq(c.received, env.Seq) {
			case prpwire.SeqGap:
				c.t.Errorf("controller: event seq %d after %d", env.Seq, c.received)
			case prpwire.SeqNext:
				var ev prp.Event
				if err := prpwire.DecodeBody(env, &ev); err != nil {
					c.t.Errorf("controller: event %d: %v", env.Seq, err)
				}
				if int(env.Seq) == len(c.events)+1 {
					c.events = append(c.events, ev)
				} else if old, _ := json.Marshal(c.events[env.Seq-1]); string(old) != string(env.Body) {
					c.t.Errorf("controller: event %d replayed with another body", env.Seq)
				}
				c.received = env.Seq
				// What the runner's outbox bounds: JSON, or for output its
				// binary record.
				c.unackSize[env.Seq] = len(env.Body)
				if ev.Kind == prp.EventOutput && ev.Output != nil {
					c.unackSize[env.Seq] = runner.OutboxRecordSize(ev.TaskID, len(ev.Output.Data))
				}
				var unacked int64
				for s, n := range c.unackSize {
					if s > c.acked {
						unacked += int64(n)
					}
				}
				c.maxUnack = max(c.maxUnack, unacked)
			}
		}
		hold, ack := c.holdAcks, c.received
		c.notify()
		c.mu.Unlock()
		if !hold && ack > c.ackedNow() {
			c.ackTo(ctx, conn, session, ack)
		}
	}
}

func (c *testController) ackedNow() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

func (c *testController) ackTo(ctx context.Context, conn *websocket.Conn, session string, seq uint64) {
	c.mu.Lock()
	c.acked = max(c.acked, seq)
	for s := range c.unackSize {
		if s <= c.acked {
			delete(c.unackSize, s)
		}
	}
	c.mu.Unlock()
	_ = c.send(ctx, conn, prpwire.TypeAck, session, 0, nil)
}

// releaseAcks stops holding acks and acks everything received.
func (c *testController) releaseAcks() {
	c.mu.Lock()
	c.holdAcks = false
	conn, ack := c.conn, c.received
	c.mu.Unlock()
	if conn != nil {
		c.ackTo(context.Background(), conn, c.session(), ack)
	}
}

func (c *testController) session() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastSession
}

// command queues a command for lease-1 / run-1 and returns it.
func (c *testController) command(cmd prp.Command) prp.Command {
	if cmd.Lease == "" {
		cmd.Lease, cmd.Run = "lease-1", "run-1"
	}
	cmd = prpwire.SealCommand(cmd)
	c.mu.Lock()
	c.commands = append(c.commands, cmd)
	c.notify()
	c.mu.Unlock()
	return cmd
}

func startCmd(id, task string, argv ...string) prp.Command {
	return prp.Command{ID: id, Kind: prp.CommandTaskStart, TaskStart: &prp.TaskStart{TaskID: task, Argv: argv}}
}

func stopCmd(id, task string, grace time.Duration) prp.Command {
	return prp.Command{ID: id, Kind: prp.CommandTaskStop, TaskStop: &prp.TaskStop{TaskID: task, Grace: grace}}
}

// waitFor waits until cond (called under the lock) holds, failing the test
// after a generous limit so that a broken runner does not hang the suite.
func (c *testController) waitFor(what string, cond func() bool) {
	c.t.Helper()
	limit := time.After(2 * time.Minute)
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-limit:
			c.t.Fatalf("controller: gave up waiting for %s", what)
		}
	}
}

// resultsLocked returns the results received for command id.
func (c *testController) resultsLocked(id string) []prp.Result {
	var out []prp.Result
	for _, e := range c.events {
		if e.Kind == prp.EventResult && e.Result.CommandID == id {
			out = append(out, *e.Result)
		}
	}
	return out
}

// waitResults waits for n results of command id and returns them.
func (c *testController) waitResults(id string, n int) []prp.Result {
	c.t.Helper()
	var out []prp.Result
	c.waitFor(fmt.Sprintf("%d results of %s", n, id), func() bool {
		out = c.resultsLocked(id)
		return len(out) >= n
	})
	return out
}

// eventsOf returns the events of kind for task.
func (c *testController) eventsOf(kind prp.EventKind, task string) []prp.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []prp.Event
	for _, e := range c.events {
		if e.Kind == kind && e.TaskID == task {
			out = append(out, e)
		}
	}
	return out
}

// output returns a stream of a task, checking that the chunks are
// contiguous: no byte lost or duplicated.
func (c *testController) output(task string, stream prp.Stream) []byte {
	c.t.Helper()
	var out []byte
	var chunks []prp.Output
	for _, e := range c.eventsOf(prp.EventOutput, task) {
		if e.Output.Stream == stream {
			chunks = append(chunks, *e.Output)
		}
	}
	sort.SliceStable(chunks, func(i, j int) bool { return chunks[i].Offset < chunks[j].Offset })
	for _, ch := range chunks {
		if ch.Offset != int64(len(out)) {
			c.t.Errorf("task %s %s: chunk at offset %d after %d bytes", task, stream, ch.Offset, len(out))
		}
		out = append(out, ch.Data...)
	}
	return out
}

// sendRaw sends env once on the current (or next) connection.
func (c *testController) sendRaw(env prpwire.Envelope) {
	c.mu.Lock()
	c.raw = append(c.raw, env)
	c.notify()
	c.mu.Unlock()
}

// drop cuts the current connection.
func (c *testController) drop() {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		conn.CloseNow()
	}
}
