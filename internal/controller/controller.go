package controller

import (
	"cmp"
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

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/lease"
)

// Options configure a Controller: optional knobs only, each documenting
// its default (a nil *Options means every default). The required
// collaborators (the Signer, the LeaseReader) and the SecretResolver hook
// are New's arguments.
type Options struct {
	// Tickets holds bootstrap tickets. Default: a memory TicketStore (one
	// process only; replicas need a shared store).
	Tickets prp.TicketStore
	// Store holds sessions, the command journal and event metadata.
	// Default: NewMemoryStore's.
	Store Store
	// DataDir is the directory where the controller keeps the output
	// bytes of tasks (chunk files per session; the Store indexes them);
	// required. berth.New makes a temporary one when it is empty.
	DataDir string
	// Authorizer decides MintTicket, dispatch and reads (AUTH-1).
	// Default: authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Heartbeat is how often a connected runner and the controller ping
	// each other; a side that hears nothing for three heartbeats closes
	// the connection (the session resumes on the next). The claims of
	// the connections whose runner answered are renewed together, one
	// store write for those answered within a quarter heartbeat (at most
	// a second). Default: 10 s.
	Heartbeat time.Duration
	// Poll is how often waiters and followers re-read the store besides
	// this process's own notifications (other replicas' writes), and how
	// often the one journal poller asks the store, in one read for all
	// connected sessions, which have commands another replica journaled
	// (their writers are woken, no other's). Default: 500 ms.
	Poll time.Duration
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
	// MaxSessions is the ceiling on the runner connections this
	// controller serves at once (admission control, issue 55): past it a
	// new connection is refused before the upgrade with HTTP 503, code
	// prpwire.CodeAtCapacity and a Retry-After, and counted
	// (Admission().RefusedSessions); the runner backs off and retries
	// (its refusals other than 401 and 403 are passing ones), and is
	// admitted once a connection ends. Default 0: 10,000; negative: no
	// ceiling.
	MaxSessions int
	// MaxInflightBytes is the ceiling on the output bytes this controller
	// holds in flight over all its connections: read from runners and
	// not yet acked (stored and synced). While it is reached a new
	// connection is refused as past MaxSessions (counted in
	// Admission().RefusedBytes); a connected session is not cut, its own
	// window bounds it (the welcome's max_unacked_bytes: the runner sends
	// no more until the writer acks, and the writer acks only what is
	// stored and synced), so a store that falls behind slows the
	// connected runners and keeps new ones out. Default 0: 1 GiB;
	// negative: no ceiling.
	MaxInflightBytes int64
	// Logger receives diagnostics; never secrets. Default: discard.
	Logger *slog.Logger
	// limits are the welcome's limits (tests set them through
	// export_test.go; zero fields take the defaults below and Heartbeat).
	limits prpwire.Welcome
	// tokenTTL is the lifetime of task tokens (tests shorten it); they
	// are renewed at half life while connected. Default:
	// prpwire.DefaultTokenTTL.
	tokenTTL time.Duration
	// jsonOutput withholds prpwire.CapBinaryOutput, so that runners send
	// output as JSON envelopes (base64) like runners that do not offer
	// binary frames (tests of that path).
	jsonOutput bool
	// Settings reads the instance settings (CFG-9; an
	// instance.Reader): with environments disabled, Attach
	// and Attachment.Start refuse with an error wrapping
	// instance.ErrEnvironmentsDisabled, and under managed-sandbox-only
	// Attach refuses a host driver's lease (instance.ErrManagedSandboxOnly;
	// the lease manager refuses acquiring one). Both also wrap
	// drivers.ErrUnavailable. Reads, waits, output and stops of tasks
	// already started go on. Default nil: the settings refuse nothing.
	// berth.New passes the System's.
	Settings instance.Reader
}

// Controller serves runners (ServeHTTP) and dispatches work to them. It is
// safe for concurrent use; several controllers (replicas) may share one
// Store, TicketStore and Signer.
type Controller struct {
	o       Options
	signer  *prp.Signer
	leases  LeaseReader
	secrets SecretResolver
	x       *prpwire.Exchanger
	sink    outputSink
	limits  prpwire.Welcome
	log     *slog.Logger
	// grant is what a task session may be granted of what its runner
	// offers.
	grant []prpwire.Capability

	// group commits the intake of every connection (a GroupIntaker
	// store; nil otherwise).
	group *groupCommitter

	mu      sync.Mutex
	changed chan struct{}
	// sessChanged holds the channels notifySession closes, by session:
	// a session's events and commands wake its own waiters only (with
	// every session's on one channel, each stored batch of one woke every
	// connection's writer and every follower, which then read the store:
	// work that grew with the square of the sessions, issue 55).
	sessChanged map[string]chan struct{}
	live        map[string]*liveConn
	// polling: the journal poller runs (pollJournal: while there are
	// live connections); stop ends it, cancelled by Close.
	polling bool
	// claims are the connections' claims waiting for renewClaims, which
	// runs while renewing.
	claimMu  sync.Mutex
	claims   []*claimRenewal
	renewing bool
	stop     context.Context
	stopAll  context.CancelFunc
	hellos   map[string]prpwire.Hello
	closed   bool
	// attached holds the ingress servers of the runners Attach connected,
	// by lease (attach.go).
	attached map[string]*attachment
	// runs holds the attachment Handle.Run uses per lease, and runLocks
	// the lease's first Run while it attaches (run.go).
	runs     map[string]*Attachment
	runLocks map[string]chan struct{}

	// adm counts what admission control bounds (admission.go).
	adm admission

	// secretFrames counts the secrets frames sent (for tests).
	secretFrames atomic.Int64
	// handovers counts the pool sessions whose token the writer renewed
	// for the adopting lease (for tests).
	handovers atomic.Int64
}

// New returns a Controller with opts' defaults filled in (nil opts: every
// default), and the hook the lease manager needs from it.
//
// signer mints and verifies connection tokens; replicas share its keys.
// leases reads the lease records: a ticket is minted only for an active
// lease, bound to the lease's recorded company, and a session connects and
// has its token renewed only while its lease is active, never past its
// end; replicas read one lease store. Both are required (an error
// otherwise). secrets, if not nil, resolves the secret references of tasks
// (prp.SecretUse): checked at Attachment.Start, resolved when the command is
// delivered (the SecretResolver that handover.New returns); nil: a task
// with secrets is refused with an error wrapping ErrSecretsUnsupported.
//
// The returned leasehook.TaskStopper is the controller's hook for the lease
// manager (berth.New gives it to the manager): it stops and verifies the
// runner tasks of a lease before its release or cleanup ends the sandbox
// (PRP-6), and closes what serves the lease's runners from this process
// once the manager no longer holds the lease. It answers for no
// principal: the manager calls it after it authorized the release or the
// sweep. So it is handed to the composer here and is no method of the
// Controller, which anyone holding it could call; a host stops tasks for a
// principal with Task.Stop.
func New(signer *prp.Signer, leases LeaseReader, secrets SecretResolver, opts *Options) (*Controller, leasehook.TaskStopper, error) {
	if signer == nil {
		return nil, nil, errors.New("controller: New needs a Signer")
	}
	if leases == nil {
		return nil, nil, errors.New("controller: New needs a LeaseReader")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	c := &Controller{o: o, signer: signer, leases: leases, secrets: secrets, changed: make(chan struct{}), sessChanged: map[string]chan struct{}{}, live: map[string]*liveConn{}, hellos: map[string]prpwire.Hello{}, attached: map[string]*attachment{},
		runs: map[string]*Attachment{}, runLocks: map[string]chan struct{}{}}
	c.stop, c.stopAll = context.WithCancel(context.Background())
	if c.o.Tickets == nil {
		c.o.Tickets = prpwire.NewMemoryTicketStore()
	}
	if c.o.Store == nil {
		c.o.Store = NewMemoryStore()
	}
	// A store sealed by package store (SealStore) is used unwrapped, so
	// that its optional interfaces are seen: behind the seal the SQL
	// stores' EventBatcher was hidden, and every event was a commit of
	// its own (issue 55).
	if u, ok := c.o.Store.(interface{ UnsealStore() RunnerStore }); ok {
		c.o.Store = u.UnsealStore()
	}
	if gi, ok := c.o.Store.(GroupIntaker); ok {
		c.group = newGroupCommitter(gi)
	}
	sink, err := newFileSink(c.o.DataDir)
	if err != nil {
		return nil, nil, err
	}
	c.sink = sink
	if c.o.Authorizer == nil {
		c.o.Authorizer = authz.DefaultPolicy{}
	}
	if c.o.tokenTTL <= 0 {
		c.o.tokenTTL = prpwire.DefaultTokenTTL
	}
	c.o.MaxSessionOutput = cmp.Or(c.o.MaxSessionOutput, defaultMaxSessionOutput)
	c.o.MaxSessionEvents = cmp.Or(c.o.MaxSessionEvents, defaultMaxSessionEvents)
	c.o.MaxSessions = cmp.Or(c.o.MaxSessions, defaultMaxSessions)
	c.o.MaxInflightBytes = cmp.Or(c.o.MaxInflightBytes, defaultMaxInflightBytes)
	if c.o.Poll <= 0 {
		c.o.Poll = 500 * time.Millisecond
	}
	c.log = c.o.Logger
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	l := c.o.limits
	l.Heartbeat = cmp.Or(l.Heartbeat, c.o.Heartbeat, 10*time.Second)
	l.DeadAfter = cmp.Or(l.DeadAfter, 3*l.Heartbeat)
	l.MaxFrame = cmp.Or(l.MaxFrame, prpwire.DefaultMaxFrame)
	l.MaxOutputChunk = cmp.Or(l.MaxOutputChunk, prpwire.DefaultMaxOutputChunk)
	l.MaxUnackedBytes = cmp.Or(l.MaxUnackedBytes, prpwire.DefaultMaxUnackedBytes)
	l.OrphanGrace = cmp.Or(l.OrphanGrace, 5*time.Minute)
	l.Version, l.Session, l.NextCommandSeq = prpwire.MaxVersion, "s_check", 1
	if err := l.Validate(); err != nil {
		return nil, nil, fmt.Errorf("controller: options: limits: %w", err)
	}
	c.limits = l
	c.grant = []prpwire.Capability{prpwire.CapTasks, prpwire.CapStopProof, prpwire.CapStdin}
	if !c.o.jsonOutput {
		c.grant = append(c.grant, prpwire.CapBinaryOutput)
	}
	c.x = &prpwire.Exchanger{Store: c.o.Tickets, Signer: c.signer, TokenTTL: c.o.tokenTTL}
	return c, taskStopper{c}, nil
}

// TicketRequest says what a ticket grants: a runner for one lease and run,
// with a scope.
type TicketRequest struct {
	// Lease is the lease's id. Required.
	Lease string
	// Run is the run of the runner (required: an empty or malformed one is
	// refused); one that starts with prp.PoolRunPrefix is refused
	// (errcode.ErrInvalid): such runs are warm-pool members', which only the
	// lease manager starts.
	Run string
	// Company, if set, must be the lease's recorded company; the ticket
	// carries the recorded one either way.
	Company string
	// Scope is the runner's identity. Default "": prp.ScopeTask, as
	// Attach's.
	Scope prp.Scope
	// TTL bounds the ticket (and the lease's end does). Default 0: five
	// minutes, the longest a ticket lives.
	TTL time.Duration
	// Holder, if not nil, is the handle of lease Lease held in this
	// process: the ticket is the holder's, and the session its exchange
	// creates is one the lease's release stops (StopTasks). Attach sets
	// it. Without it the session's tasks are the minting host's own
	// business and the release never waits on its runner. A holder ticket
	// is minted only for a lease acquired for a runner
	// (lease.AcquireRequest.Runner); any other is refused with an error
	// wrapping drivers.ErrUnsupported, as Attach refuses it.
	Holder *lease.Handle
}

// MintTicket reads lease req.Lease from the LeaseReader (New), authorizes p on it
// (authz.ActionLease on the lease's recorded company) and returns a
// new one-use ticket for req bound to that company; only its hash is
// stored, and it expires no later than the lease. The ticket's text
// (Ticket.String) is the secret to hand to the runner. A lease that does
// not exist and one p may not read are refused alike, with an error
// wrapping errcode.ErrNotFound that names only the id; a lease p may read but not
// lease is refused with errcode.ErrDenied; a lease that is not active
// with errcode.ErrConflict, and a req.Company that is not the lease's with
// errcode.ErrInvalid.
func (c *Controller) MintTicket(ctx context.Context, p authz.Principal, req TicketRequest) (prp.Ticket, prp.TicketRecord, error) {
	if req.Holder != nil && req.Holder.ID() != req.Lease {
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint ticket for lease %s: field Holder is the handle of another lease", req.Lease)
	}
	return c.mintTicket(ctx, p, req, "", req.Holder != nil)
}

// mintResumeTicket authorizes p on session (authz.ActionLease on
// its lease's company) and returns a new one-use resume ticket for it: its
// exchange creates no session but mints a token for session, so that a
// restarted runner rejoins it with its state directory (PRP-5). A runner
// keeps its token in memory only; a restart needs this ticket. ttl zero
// means prpwire.MaxTicketTTL. Attach mints one itself when its session's
// runner is gone.
func (c *Controller) mintResumeTicket(ctx context.Context, p authz.Principal, session string, ttl time.Duration) (prp.Ticket, prp.TicketRecord, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, err
	}
	return c.mintTicket(ctx, p, TicketRequest{Lease: s.Lease, Run: s.Run, Company: s.Company, Scope: s.Scope, TTL: ttl}, s.ID, s.Holder)
}

// mintTicket is MintTicket of a resume ticket for session resume (if not
// empty) or of a holder ticket (Attach's).
func (c *Controller) mintTicket(ctx context.Context, p authz.Principal, req TicketRequest, resume string, holder bool) (prp.Ticket, prp.TicketRecord, error) {
	req.Scope = cmp.Or(req.Scope, prp.ScopeTask)
	if err := tenantRun("run", req.Run); err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint ticket for lease %s: %w", req.Lease, err)
	}
	l, err := c.leaseFor(ctx, p, req.Lease)
	if err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, err
	}
	if poolMember(l) {
		// A warm-pool member's runner is started by the lease manager
		// only (startPoolRunner), never for a principal.
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint ticket for lease %s: the lease is a warm-pool member, not adopted: %w", req.Lease, errcode.ErrConflict)
	}
	if holder && l.Runner == nil {
		// The lease manager asks for the stop of a lease's tasks only when
		// the lease was acquired for a runner (leasehook.TaskStopper): a
		// holder session of any other lease would outlive its release.
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint holder ticket for lease %s: the lease was acquired without a runner (lease.AcquireRequest.Runner): %w", req.Lease, drivers.ErrUnsupported)
	}
	return c.mintFor(ctx, l, req, resume, holder)
}

// mintFor mints the ticket of mintTicket for l, read (and authorized)
// already: l must be active, or a warm-pool member (startPoolRunner).
func (c *Controller) mintFor(ctx context.Context, l *lease.Lease, req TicketRequest, resume string, holder bool) (prp.Ticket, prp.TicketRecord, error) {
	if req.Company != "" && req.Company != l.Company {
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint ticket for lease %s: company %q is not the lease's: %w", req.Lease, req.Company, errcode.ErrInvalid)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	end, ok := leaseEnd(l, now)
	if poolMember(l) {
		end, ok = l.ExpiresAt, l.ExpiresAt.IsZero() || now.Before(l.ExpiresAt)
	}
	if !ok {
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint ticket for lease %s: the lease is %s, not active: %w", req.Lease, l.Status, errcode.ErrConflict)
	}
	ttl := cmp.Or(req.TTL, prpwire.MaxTicketTTL)
	t, err := prp.NewTicket()
	if err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, err
	}
	r := prp.TicketRecord{Hash: t.Hash(), Lease: l.ID, Run: req.Run, Company: l.Company, Scope: req.Scope, CreatedAt: now, ExpiresAt: now.Add(ttl),
		Resume: resume, Holder: holder}
	if !end.IsZero() && end.Before(r.ExpiresAt) {
		r.ExpiresAt = end
	}
	if err := c.o.Tickets.CreateTicket(ctx, r); err != nil {
		return prp.Ticket{}, prp.TicketRecord{}, fmt.Errorf("controller: mint ticket for lease %s: %w", req.Lease, err)
	}
	return t, r, nil
}

// ServeHTTP serves the runner protocol under any prefix: POST
// ".../exchange" trades a ticket for a token (401 with a stable code on a
// bad ticket, before any upgrade), GET ".../connect" is the WebSocket
// endpoint (the token in "Authorization: Bearer"). Anything else is 404.
func (c *Controller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case path.Base(r.URL.Path) == prpwire.ExchangePath && r.Method == http.MethodPost:
		c.exchange(w, r)
	case path.Base(r.URL.Path) == prpwire.ConnectPath && r.Method == http.MethodGet:
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
	var req prpwire.ExchangeRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, prpwire.MaxExchangeBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, prpwire.ErrorResponse{Code: prpwire.CodeBadRequest, Message: "the body is not an exchange request"})
		return
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	resp, claims, rec, err := c.x.ExchangeTicket(r.Context(), req, now)
	if err != nil {
		if code := prpwire.CodeOf(err); code != "" {
			writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: code, Message: err.Error()})
			return
		}
		c.log.Error("controller: exchange", "lease", req.Lease, "err", err)
		writeJSON(w, http.StatusInternalServerError, prpwire.ErrorResponse{Code: prpwire.CodeInternal, Message: "the exchange failed"})
		return
	}
	if rec.Resume != "" {
		// A resume ticket rejoins its session, which must still be the
		// one it was minted for.
		s, err := c.o.Store.GetSession(r.Context(), rec.Resume)
		if err != nil || s.Lease != claims.Lease || s.Run != claims.Run || s.Scope != claims.Scope || s.Company != claims.Company {
			c.log.Warn("controller: exchange: no session for the resume ticket", "session", rec.Resume, "err", err)
			writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: prpwire.CodeSessionUnknown, Message: "no session " + rec.Resume})
			return
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	s := Session{ID: claims.Session, Lease: claims.Lease, Run: claims.Run, Company: claims.Company, Scope: claims.Scope, CreatedAt: now,
		Ticket: rec.Hash.String(), Holder: rec.Holder}
	if err := c.o.Store.CreateSession(r.Context(), s); err != nil {
		c.log.Error("controller: exchange: create session", "lease", req.Lease, "err", err)
		writeJSON(w, http.StatusInternalServerError, prpwire.ErrorResponse{Code: prpwire.CodeInternal, Message: "the exchange failed"})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// sessionHello returns the last hello a runner sent on session to this
// controller (its platform, version and capabilities), and whether there
// was one. p must be allowed to read the session's lease: a session that
// does not exist and one p may not read are the same not found (an error
// wrapping errcode.ErrNotFound), read from the store.
func (c *Controller) sessionHello(ctx context.Context, p authz.Principal, session string) (prpwire.Hello, bool, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return prpwire.Hello{}, false, err
	}
	h, ok := c.hello(s.ID)
	return h, ok, nil
}

// hello returns the last hello a runner sent on session to this
// controller, and whether there was one. It authorizes nothing.
func (c *Controller) hello(session string) (prpwire.Hello, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.hellos[session]
	return h, ok
}

// isConnected reports whether a runner of session is connected to this
// controller (welcomed and not yet gone).
func (c *Controller) isConnected(session string) bool {
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

// Close drops every runner connection and ends its claim in the store
// before it returns (they reconnect elsewhere or later, at once), refuses
// new ones and closes the ingress servers of attached runners (Attach); it
// does not close the stores and stops no task.
func (c *Controller) Close() error {
	c.mu.Lock()
	c.closed = true
	c.stopAll()
	conns := make(map[string]*liveConn, len(c.live))
	for id, lc := range c.live {
		conns[id] = lc
	}
	c.mu.Unlock()
	for id, lc := range conns {
		lc.ws.CloseNow()
		// The claim ends here, not only in the connection's handler,
		// which may run after the host closed the store or exited: a
		// claim left behind refuses the runner's reconnection to the next
		// process or replica (409 session_connected) for DeadAfter.
		c.releaseConnection(id, lc.conn)
	}
	c.closeAttachments()
	if c.group != nil {
		c.group.close()
	}
	return nil
}

// notify wakes the waiters of a change of session that concerns more
// than its own waiters (a connection came or went: Attach's waits for a
// hello), and session's own.
func (c *Controller) notify(session string) {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	c.notifySession(session)
}

// notifySession wakes the waiters and followers of session (its events
// or commands were stored), and no other.
func (c *Controller) notifySession(session string) {
	c.mu.Lock()
	if ch := c.sessChanged[session]; ch != nil {
		close(ch)
		delete(c.sessChanged, session)
	}
	// The session's live connection's writer reads the journal again
	// (its commands); it waits on no channel of its own (startWriter).
	if lc := c.live[session]; lc != nil {
		lc.wakeWriter()
	}
	c.mu.Unlock()
}

// sessionChanges returns the channel the next notifySession (or notify)
// of session closes.
func (c *Controller) sessionChanges(session string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.sessChanged[session]
	if ch == nil {
		ch = make(chan struct{})
		c.sessChanged[session] = ch
	}
	return ch
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

// admit returns nil when the instance settings (Options.Settings) let a
// run start on a lease of provider (a host driver's when host), else an
// error wrapping instance.ErrEnvironmentsDisabled or
// instance.ErrManagedSandboxOnly and drivers.ErrUnavailable. A failing
// settings read is returned, never taken as "enabled".
func (c *Controller) admit(ctx context.Context, provider string, host bool) error {
	_, err := c.settings(ctx, provider, host)
	return err
}

// admitLease is admit for the lease of handle h, which also holds the
// level its driver declares for the lease's config to the minimum in force
// now (instance.Settings.Minimum): a lease acquired before an instance
// admin raised the minimum starts no new run below it (the reason
// isolation_below_minimum, wrapping drivers.ErrUnavailable). An
// environment's requireIsolation raised after the acquisition is not
// checked here: the next acquisition is.
func (c *Controller) admitLease(ctx context.Context, l *lease.Lease, h any) error {
	s, err := c.settings(ctx, l.Provider, leasehook.Kind(h) == drivers.KindHost)
	if err != nil || s == nil {
		return err
	}
	if declared, minimum := leasehook.Isolation(h), s.Minimum(); declared < minimum {
		return &errcode.Error{Code: errcode.Unavailable, Reason: "isolation_below_minimum",
			Message: fmt.Sprintf("Lease %s on %s has isolation %s, below the minimum %s the instance settings require now: release it and acquire a target that isolates more.", l.ID, l.Provider, declared, minimum),
			Err: fmt.Errorf("lease %s: driver %s declares isolation %s for its config, below the instance's minimum %s: %w",
				l.ID, l.Provider, declared, minimum, drivers.ErrUnavailable)}
	}
	return nil
}

// settings reads the instance settings and admits provider by them (see
// admit); nil settings without Options.Settings.
func (c *Controller) settings(ctx context.Context, provider string, host bool) (*instance.Settings, error) {
	if c.o.Settings == nil {
		return nil, nil
	}
	s, err := c.o.Settings.Current(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Admit(provider, host); err != nil {
		return nil, fmt.Errorf("%w: %w", err, drivers.ErrUnavailable)
	}
	return &s, nil
}
