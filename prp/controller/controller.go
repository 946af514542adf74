package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/prp"
)

// Options configure a Controller. Signer is required; every other field
// documents its default.
type Options struct {
	// Signer mints and verifies connection tokens. Required; replicas
	// share its keys.
	Signer *prp.Signer
	// Tickets holds bootstrap tickets. Default: a prp.MemoryTicketStore
	// (one process only; replicas need a shared store).
	Tickets prp.TicketStore
	// Store holds sessions, the command journal and event metadata.
	// Default: a MemoryStore.
	Store Store
	// Sink keeps output bytes. Default: a FileSink under DataDir.
	Sink OutputSink
	// DataDir is the FileSink's directory; required when Sink is nil.
	DataDir string
	// Authorizer decides MintTicket, dispatch and reads (AUTH-1).
	// Default: environment.DefaultPolicy.
	Authorizer environment.Authorizer
	// Limits are the welcome's limits; Version, Session, EventAck,
	// NextCommandSeq, Capabilities and TokenExpiry are ignored. Zero
	// fields mean: heartbeat 10 s, dead after 30 s, prp.DefaultMaxFrame,
	// prp.DefaultMaxOutputChunk, prp.DefaultMaxUnackedBytes, orphan grace
	// 5 min.
	Limits prp.Welcome
	// TokenTTL is the lifetime of task tokens; they are renewed at half
	// life while connected. Default: prp.DefaultTokenTTL.
	TokenTTL time.Duration
	// Poll is how often waiters and followers re-read the store besides
	// this process's own notifications (other replicas' writes). Default:
	// 500 ms.
	Poll time.Duration
	// Secrets resolves the secret references of tasks (prp.SecretUse):
	// checked at Dispatch, resolved when the command is delivered. Default:
	// none, and a task with secrets is refused with an error wrapping
	// ErrSecretsUnsupported.
	Secrets SecretResolver
	// MaxSessionOutput caps the output bytes stored per session, over all
	// its tasks; a task's own prp.TaskStart.OutputLimit (0: none but this)
	// caps its share. Past a cap the controller acks the output and
	// discards it, counts the bytes (OutputUsage.Truncated) and marks the
	// task's output truncated (the chunk's Output.Truncated, its exit's
	// and result's Exit.Truncated); the task is not stopped: the host
	// decides. Default: 1 GiB.
	MaxSessionOutput int64
	// MaxSessionEvents caps the events stored per session; past it events
	// are acked and discarded (counted in OutputUsage.Discarded), except a
	// result of a command still waiting for one. Default: 1,000,000.
	MaxSessionEvents int64
	// JSONOutput withholds prp.CapBinaryOutput, so that runners send
	// output as JSON envelopes (base64) like runners that do not offer
	// binary frames. Default: false (binary output frames are granted).
	JSONOutput bool
	// Logger receives diagnostics; never secrets. Default: discard.
	Logger *slog.Logger
}

// Controller serves runners (ServeHTTP) and dispatches work to them. It is
// safe for concurrent use; several controllers (replicas) may share one
// Store, TicketStore and Signer.
type Controller struct {
	o      Options
	x      *prp.Exchanger
	limits prp.Welcome
	log    *slog.Logger
	// grant is what a task session may be granted of what its runner
	// offers.
	grant []prp.Capability

	mu      sync.Mutex
	changed chan struct{}
	live    map[string]*liveConn
	hellos  map[string]prp.Hello
	closed  bool
	// attached holds the ingress servers of the runners Attach connected,
	// by lease (attach.go).
	attached map[string]*attachment

	// secretFrames counts the secrets frames sent (for tests).
	secretFrames atomic.Int64
}

// New returns a Controller with o's defaults filled in.
func New(o *Options) (*Controller, error) {
	if o == nil || o.Signer == nil {
		return nil, errors.New("controller: options: field Signer is required")
	}
	c := &Controller{o: *o, changed: make(chan struct{}), live: map[string]*liveConn{}, hellos: map[string]prp.Hello{}, attached: map[string]*attachment{}}
	if c.o.Tickets == nil {
		c.o.Tickets = &prp.MemoryTicketStore{}
	}
	if c.o.Store == nil {
		c.o.Store = &MemoryStore{}
	}
	if c.o.Sink == nil {
		s, err := NewFileSink(c.o.DataDir)
		if err != nil {
			return nil, err
		}
		c.o.Sink = s
	}
	if c.o.Authorizer == nil {
		c.o.Authorizer = environment.DefaultPolicy{}
	}
	if c.o.TokenTTL <= 0 {
		c.o.TokenTTL = prp.DefaultTokenTTL
	}
	c.o.MaxSessionOutput = cmpOr(c.o.MaxSessionOutput, DefaultMaxSessionOutput)
	c.o.MaxSessionEvents = cmpOr(c.o.MaxSessionEvents, DefaultMaxSessionEvents)
	if c.o.Poll <= 0 {
		c.o.Poll = 500 * time.Millisecond
	}
	c.log = c.o.Logger
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	l := c.o.Limits
	l.Heartbeat = cmpOr(l.Heartbeat, 10*time.Second)
	l.DeadAfter = cmpOr(l.DeadAfter, 3*l.Heartbeat)
	l.MaxFrame = cmpOr(l.MaxFrame, prp.DefaultMaxFrame)
	l.MaxOutputChunk = cmpOr(l.MaxOutputChunk, prp.DefaultMaxOutputChunk)
	l.MaxUnackedBytes = cmpOr(l.MaxUnackedBytes, prp.DefaultMaxUnackedBytes)
	l.OrphanGrace = cmpOr(l.OrphanGrace, 5*time.Minute)
	l.Version, l.Session, l.NextCommandSeq = prp.MaxVersion, "s_check", 1
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("controller: options: field Limits: %w", err)
	}
	c.limits = l
	c.grant = []prp.Capability{prp.CapTasks, prp.CapStopProof, prp.CapStdin}
	if !c.o.JSONOutput {
		c.grant = append(c.grant, prp.CapBinaryOutput)
	}
	c.x = &prp.Exchanger{Store: c.o.Tickets, Signer: c.o.Signer, TokenTTL: c.o.TokenTTL}
	return c, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// TicketRequest says what a ticket grants: a runner for one lease and run
// of a company, with a scope. TTL zero means prp.MaxTicketTTL.
type TicketRequest struct {
	Lease   string
	Run     string
	Company string
	Scope   prp.Scope
	TTL     time.Duration
}

// MintTicket authorizes p (environment.ActionLease on the lease of
// req.Company) and returns a new one-use ticket for req; only its hash is
// stored. The ticket's text (Ticket.String) is the secret to hand to the
// runner. A refusal wraps environment.ErrDenied.
func (c *Controller) MintTicket(ctx context.Context, p environment.Principal, req TicketRequest) (prp.Ticket, prp.TicketRecord, error) {
	if err := c.authorize(ctx, p, req.Lease, req.Company); err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, err
	}
	ttl := cmpOr(req.TTL, prp.MaxTicketTTL)
	t, err := prp.NewTicket()
	if err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	r := prp.TicketRecord{Hash: t.Hash(), Lease: req.Lease, Run: req.Run, Company: req.Company, Scope: req.Scope, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := c.o.Tickets.CreateTicket(ctx, r); err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint ticket for lease %s: %w", req.Lease, err)
	}
	return t, r, nil
}

// authorize asks the Authorizer whether p may act on the runner of lease
// of company (environment.ActionLease).
func (c *Controller) authorize(ctx context.Context, p environment.Principal, lease, company string) error {
	r := environment.Resource{Kind: environment.ResourceKindLease, ID: lease, Company: company}
	if err := c.o.Authorizer.Authorize(ctx, p, environment.ActionLease, r); err != nil {
		if !errors.Is(err, environment.ErrDenied) {
			err = fmt.Errorf("%w: %w", environment.Denied(p, environment.ActionLease, r), err)
		}
		return fmt.Errorf("controller: %w", err)
	}
	return nil
}

// ServeHTTP serves the runner protocol under any prefix: POST
// ".../exchange" trades a ticket for a token (401 with a stable code on a
// bad ticket, before any upgrade), GET ".../connect" is the WebSocket
// endpoint (the token in "Authorization: Bearer"). Anything else is 404.
func (c *Controller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case path.Base(r.URL.Path) == prp.ExchangePath && r.Method == http.MethodPost:
		c.exchange(w, r)
	case path.Base(r.URL.Path) == prp.ConnectPath && r.Method == http.MethodGet:
		c.connect(w, r)
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (c *Controller) exchange(w http.ResponseWriter, r *http.Request) {
	var req prp.ExchangeRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, prp.MaxExchangeBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, prp.ErrorResponse{Code: "bad_request", Message: "the body is not an exchange request"})
		return
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	resp, claims, err := c.x.Exchange(r.Context(), req, now)
	if err != nil {
		if code := prp.CodeOf(err); code != "" {
			writeJSON(w, http.StatusUnauthorized, prp.ErrorResponse{Code: code, Message: err.Error()})
			return
		}
		c.log.Error("controller: exchange", "lease", req.Lease, "err", err)
		writeJSON(w, http.StatusInternalServerError, prp.ErrorResponse{Code: "internal", Message: "the exchange failed"})
		return
	}
	s := Session{ID: claims.Session, Lease: claims.Lease, Run: claims.Run, Company: claims.Company, Scope: claims.Scope, CreatedAt: now}
	if err := c.o.Store.CreateSession(r.Context(), s); err != nil {
		c.log.Error("controller: exchange: create session", "lease", req.Lease, "err", err)
		writeJSON(w, http.StatusInternalServerError, prp.ErrorResponse{Code: "internal", Message: "the exchange failed"})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// Hello returns the last hello a runner sent on session to this
// controller, and whether there was one.
func (c *Controller) Hello(session string) (prp.Hello, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.hellos[session]
	return h, ok
}

// Connected reports whether a runner of session is connected to this
// controller (welcomed and not yet gone).
func (c *Controller) Connected(session string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[session] != nil
}

// ConnectedSessions returns the ids of the sessions whose runners are
// connected to this controller, sorted.
func (c *Controller) ConnectedSessions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.live))
	for id := range c.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Close drops every runner connection (they reconnect elsewhere or later),
// refuses new ones and closes the ingress servers of attached runners
// (Attach); it does not close the stores and stops no task.
func (c *Controller) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := make([]*liveConn, 0, len(c.live))
	for _, lc := range c.live {
		conns = append(conns, lc)
	}
	c.mu.Unlock()
	for _, lc := range conns {
		lc.ws.CloseNow()
	}
	c.closeAttachments()
	return nil
}

// notify wakes every waiter and follower of this controller.
func (c *Controller) notify() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// changes returns the channel the next notify closes.
func (c *Controller) changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// await waits for the next notify, the poll interval or ctx.
func (c *Controller) await(ctx context.Context, ch <-chan struct{}) error {
	t := time.NewTimer(c.o.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	case <-t.C:
	}
	return nil
}
