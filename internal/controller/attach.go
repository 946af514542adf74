package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
	"github.com/berthdev/berth/runnerbin"
)

// AttachStage is a step of Attach, reported to AttachRequest.Progress.
type AttachStage string

// The attach stages, in order.
const (
	// AttachInstalling: the runner binary is installed in the sandbox
	// (copied once per SHA-256) and its ingress opened.
	AttachInstalling AttachStage = "installing"
	// AttachLaunching: the runner is started detached in the sandbox.
	AttachLaunching AttachStage = "launching"
	// AttachConnecting: waiting for the runner's hello.
	AttachConnecting AttachStage = "connecting"
	// AttachConnected: the runner is welcomed.
	AttachConnected AttachStage = "connected"
)

// AttachRequest says how to connect a leased sandbox's runner. The runner
// binary is the one the lease records (lease.Lease.Runner, from
// lease.AcquireRequest.Runner): it is not given twice.
type AttachRequest struct {
	// Scope is the runner's identity: prp.ScopeTask (the default) runs
	// tasks; prp.ScopeProbe answers hello and refuses every task (PRP-8),
	// its token lives at most two minutes and is never renewed.
	Scope prp.Scope
	// Run is the run the session is for. Default: the lease's run, else a
	// new id. A run that starts with prp.PoolRunPrefix is refused
	// (errcode.ErrInvalid): such runs are warm-pool members' (pool.go).
	Run string
	// TicketTTL bounds the bootstrap ticket. Default prpwire.MaxTicketTTL (one
	// minute for a probe).
	TicketTTL time.Duration
	// Progress, if not nil, is called as each stage starts, from the
	// attaching goroutine. It must not block for long.
	Progress func(AttachStage)
}

// Attachment is a handle of a runner connected to this controller for a
// lease (Attach, Reattach): Start runs tasks on it. Its methods other than
// Start and its accessors take no principal: the handle carries the
// authority granted to the principal it was made for, as an os.File
// carries the access granted when it was opened. It is safe for
// concurrent use.
type Attachment struct {
	c                            *Controller
	p                            authz.Principal
	session, lease, run, company string
	scope                        prp.Scope
	hello                        prpwire.Hello
}

// Session returns the runner's session id.
func (a *Attachment) Session() string { return a.session }

// Run returns the run the session is for.
func (a *Attachment) Run() string { return a.run }

// Company returns the lease's company.
func (a *Attachment) Company() string { return a.company }

// Hello returns what the runner's first hello on this controller said of
// the runner: its version, binary digest and platform (os, arch, libc,
// kernel). Zero for a Reattach whose runner is not connected here.
func (a *Attachment) Hello() Hello {
	return Hello{RunnerVersion: a.hello.RunnerVersion, BinarySHA256: a.hello.BinarySHA256, Platform: a.hello.Platform}
}

// Hello is what a runner reports of itself when it connects
// (Attachment.Hello). The zero Hello means no runner said hello.
type Hello struct {
	// RunnerVersion is the runner's version string.
	RunnerVersion string
	// BinarySHA256 is the hex SHA-256 of the runner binary that runs.
	BinarySHA256 string
	// Platform is the platform the runner found itself on.
	Platform qualification.Platform
}

// Events returns at most limit (<= 0 or above 256: 256) stored events of
// the session after seq after, in seq order, output bytes read back; it
// does not wait for more. It acts as the attachment's principal.
func (a *Attachment) Events(ctx context.Context, after uint64, limit int) ([]StoredEvent, error) {
	if limit <= 0 || limit > 256 {
		limit = 256
	}
	return a.c.eventsAfter(ctx, a.p, a.session, after, limit)
}

// Reattach returns the handle of session for p, whose runner some Attach
// (in this process or another replica) or a ticket the host minted
// connected: for a host that restarted, or a follower that reconnects. It
// authorizes p on the session as every session call does (a session p may
// not read is errcode.ErrNotFound, one it may read but not act on errcode.ErrDenied)
// and serves nothing: the runner reconnects to the controller it knows.
// After a restart of the host, whose process served the runner's ingress,
// lease.Handle.Reattach (on a handle of lease.Manager.Open) serves it again
// and relaunches the runner with a resume ticket where it is gone.
func (c *Controller) Reattach(ctx context.Context, p authz.Principal, session string) (*Attachment, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return nil, err
	}
	hello, _ := c.hello(s.ID)
	return &Attachment{c: c, p: p, session: s.ID, lease: s.Lease, run: s.Run, company: s.Company, scope: s.Scope, hello: hello}, nil
}

// attachment is what serves one lease's runner from this process.
type attachment struct {
	lease string
	pool  bool // a warm-pool member's, not adopted yet (serve); c.mu guards it
	srv   *http.Server
	in    drivers.RunnerIngress
	done  chan struct{} // closed when Serve returned
}

func (a *attachment) close() {
	_ = a.srv.Close() // closes the ingress listener too
	_ = a.in.Close()
	<-a.done
}

// Attach connects the runner of the leased sandbox h to this controller
// for p and returns its handle: it installs the runner the lease was
// acquired for (lease.Lease.Runner, through leasehook.HostRunner, once per
// SHA-256; a lease acquired without one is refused with an error wrapping
// drivers.ErrUnsupported), serves
// this controller on the ingress for as long as the lease lasts (until the
// lease manager's LeaseEnded, or Close), mints a one-use ticket of
// req.Scope for the lease (authorized as MintTicket authorizes: a lease
// p may not read is errcode.ErrNotFound, one it may read but not lease
// errcode.ErrDenied; nothing is installed then), launches the runner
// detached and waits for the hello on the session of that ticket: the
// holder's own session (Session.Holder), never another session of the
// lease and run. When the holder's own session for the run and scope
// exists, Attach returns it while its runner is connected here, waits
// while another connection's claim on it lasts (at most DeadAfter for a
// dead one), and otherwise relaunches the runner with a resume ticket of it
// (the runner replays its state directory). ctx
// bounds everything; on failure the ingress is closed again. When ctx's
// deadline passes without a hello (a runner built for another
// architecture, one that crashed or whose ticket was refused), the error
// names the sandbox and the endpoint and carries the end of the runner's
// log (RunnerIngress.LogTail: at most maxAttachLogTail bytes, printable
// text only, never the ticket), read within a few seconds more; a
// cancelled ctx returns at once without it. A lease has
// at most one attached runner in this process: a second Attach while one
// is attached fails. A driver that cannot host a runner fails with an
// error wrapping drivers.ErrUnsupported. With the instance settings
// (Options.Settings) disabling environments, or allowing managed sandboxes
// only and h a host driver's lease, Attach refuses before anything is
// installed (instance.ErrEnvironmentsDisabled,
// instance.ErrManagedSandboxOnly).
func (c *Controller) Attach(ctx context.Context, p authz.Principal, h *lease.Handle, req AttachRequest) (*Attachment, error) {
	// Every decision below reads the stored record, never h.Lease(): for a
	// principal who may not read configs that is the redacted view, without
	// the labels that tell an adopted warm-pool member (issue 49).
	l, err := c.leaseFor(ctx, p, h.ID())
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Attachment, error) {
		return nil, fmt.Errorf("controller: attach a runner to lease %s: %w", l.ID, err)
	}
	if l.Runner == nil {
		return fail(fmt.Errorf("the lease was acquired without a runner (lease.AcquireRequest.Runner): %w", drivers.ErrUnsupported))
	}
	scope := req.Scope
	if scope == "" {
		scope = prp.ScopeTask
	}
	if !scope.Valid() {
		return fail(fmt.Errorf("field scope %q is unknown", scope))
	}
	run := req.Run
	if run == "" {
		run = l.Run
	}
	if run == "" || !prpwire.ValidID(run) {
		var err error
		if run, err = prp.NewID("run"); err != nil {
			return fail(err)
		}
	}
	if err := tenantRun("run", run); err != nil {
		return fail(err)
	}
	ttl := req.TicketTTL
	if ttl <= 0 {
		ttl = prpwire.MaxTicketTTL
		if scope == prp.ScopeProbe {
			ttl = time.Minute
		}
	}
	// CFG-9: no run starts while the instance settings refuse the target.
	if err := c.admitLease(ctx, l, h); err != nil {
		return fail(err)
	}
	progress := func(s AttachStage) {
		if req.Progress != nil {
			req.Progress(s)
		}
	}
	progress(AttachInstalling)
	in, detach, err := c.serve(ctx, h, l, false)
	if err != nil {
		return fail(err)
	}
	// A lease that adopted a warm-pool member takes the member's runner
	// session over first (pool.go): the session below is then its own.
	handed := false
	if scope == prp.ScopeTask && adoptedMember(l) {
		if handed, err = c.handOver(ctx, l, run); err != nil {
			detach()
			return fail(err)
		}
	}

	// The lease's own session: the newest one the holder's Attach created
	// for this run and scope. Its runner is relaunched with a resume
	// ticket when it is gone; without one a fresh holder ticket creates
	// it. Sessions of the lease that other tickets created are never
	// picked.
	own, err := c.ownSession(ctx, l.ID, run, scope)
	if err != nil {
		detach()
		return fail(err)
	}
	if own != nil {
		if a, ok, err := c.awaitOwnRunner(ctx, p, *own, scope, handed); err != nil {
			detach()
			return fail(err)
		} else if ok {
			progress(AttachConnected)
			return a, nil
		}
	}
	var t prp.Ticket
	var rec prp.TicketRecord
	if own != nil {
		t, rec, err = c.mintTicket(ctx, p, TicketRequest{Lease: l.ID, Run: run, Company: l.Company, Scope: scope, TTL: ttl}, own.ID, true)
	} else {
		t, rec, err = c.MintTicket(ctx, p, TicketRequest{Lease: l.ID, Run: run, Company: l.Company, Scope: scope, TTL: ttl, Holder: h})
	}
	if err != nil {
		detach()
		return nil, err
	}
	progress(AttachLaunching)
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: l.ID, Ticket: t.String()}); err != nil {
		detach()
		return fail(err)
	}
	progress(AttachConnecting)
	id, hello, err := c.awaitHello(ctx, h, in, rec)
	if err != nil {
		detach()
		return fail(err)
	}
	progress(AttachConnected)
	return &Attachment{c: c, p: p, session: id, lease: l.ID, run: run, company: l.Company, scope: scope, hello: hello}, nil
}

// awaitHello waits until the runner launched with the ticket of rec on
// h's ingress in is connected here and returns its session and hello.
// When ctx ends first, the error names the sandbox and the endpoint and
// carries the end of the runner's log (runnerLogTail).
func (c *Controller) awaitHello(ctx context.Context, h *lease.Handle, in drivers.RunnerIngress, rec prp.TicketRecord) (string, prpwire.Hello, error) {
	for {
		ch := c.changes()
		if id, hello, ok := c.liveTicket(rec); ok {
			if rec.Resume != "" {
				c.burnTicket(ctx, rec)
			}
			return id, hello, nil
		}
		select {
		case <-ctx.Done():
			return "", prpwire.Hello{}, fmt.Errorf("no hello from the runner in sandbox %s at %s%s: %w", h.SandboxID(), in.Endpoint(), c.runnerLogTail(ctx, in, h.ID()), ctx.Err())
		case <-ch:
		}
	}
}

// serve opens the ingress of h's sandbox (installing the runner the lease
// records; l is h's stored record, never a redacted view) and serves this controller on it until the lease ends
// (leaseEnded) or Close; it returns the ingress and the func that closes it
// again. A lease has at most one attached runner in this process: one
// already attached is an error, except the ingress a warm-pool member's
// runner was started on (pool), which the lease that adopted the member
// takes over once. pool marks the ingress of such a member.
func (c *Controller) serve(ctx context.Context, h *lease.Handle, l *lease.Lease, pool bool) (drivers.RunnerIngress, func(), error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, errors.New("the controller is closed")
	}
	if a := c.attached[l.ID]; a != nil {
		if a.pool && !pool && adoptedMember(l) {
			a.pool = false // the adopter's now
			c.mu.Unlock()
			return a.in, c.detacher(l.ID, a), nil
		}
		c.mu.Unlock()
		return nil, nil, errors.New("a runner is already attached to the lease in this process")
	}
	c.mu.Unlock()
	in, err := leasehook.HostRunner(h, ctx)
	if err != nil {
		return nil, nil, err
	}
	// HTTP/1 only: a runner speaks WebSocket over HTTP/1.1, and a server
	// left to configure HTTP/2 builds its HTTP/2 state, a server a lease
	// (issue 55: about 1 KB of every session).
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	a := &attachment{lease: l.ID, in: in, pool: pool, srv: &http.Server{Handler: c, ReadHeaderTimeout: 30 * time.Second, Protocols: &protocols}, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(in); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Info("controller: runner ingress", "lease", l.ID, "err", err)
		}
	}()
	c.mu.Lock()
	if c.closed || c.attached[l.ID] != nil {
		c.mu.Unlock()
		a.close()
		return nil, nil, errors.New("the controller closed, or another runner attached meanwhile")
	}
	c.attached[l.ID] = a
	c.mu.Unlock()
	return in, c.detacher(l.ID, a), nil
}

// detacher returns the func that closes a, lease's attachment.
func (c *Controller) detacher(lease string, a *attachment) func() {
	return func() {
		c.mu.Lock()
		if c.attached[lease] == a {
			delete(c.attached, lease)
		}
		c.mu.Unlock()
		a.close()
	}
}

// ownSession returns the newest session of lease for run and scope that
// the holder's Attach created (Session.Holder), or nil.
func (c *Controller) ownSession(ctx context.Context, lease, run string, scope prp.Scope) (*Session, error) {
	ss, err := c.o.Store.LeaseSessions(ctx, lease)
	if err != nil {
		return nil, err
	}
	for i := len(ss) - 1; i >= 0; i-- {
		if s := ss[i]; s.Holder && s.Run == run && s.Scope == scope {
			return &s, nil
		}
	}
	return nil, nil
}

// awaitOwnRunner returns the attachment of own when its runner is
// connected to this controller (ok). While another connection's claim on
// it lasts (a runner connected elsewhere, or a dead connection not yet
// past its DeadAfter) it waits; when no runner is connected it returns ok
// false: the caller relaunches the runner with a resume ticket.
//
// For a session just handed over from a warm-pool member (elsewhere), a
// runner connected to another replica is taken as it is: that replica's
// writer renews its token and sends it the commands journaled here, and
// the attachment's Hello is zero.
func (c *Controller) awaitOwnRunner(ctx context.Context, p authz.Principal, own Session, scope prp.Scope, elsewhere bool) (*Attachment, bool, error) {
	for {
		ch := c.changes()
		c.mu.Lock()
		lc, hello := c.live[own.ID], c.hellos[own.ID]
		c.mu.Unlock()
		if lc != nil {
			return &Attachment{c: c, p: p, session: own.ID, lease: own.Lease, run: own.Run, company: own.Company, scope: scope, hello: hello}, true, nil
		}
		s, err := c.o.Store.GetSession(ctx, own.ID)
		if err != nil {
			return nil, false, err
		}
		if !s.ConnectedUntil.After(time.Now()) {
			return nil, false, nil
		}
		if elsewhere {
			return &Attachment{c: c, p: p, session: own.ID, lease: own.Lease, run: s.Run, company: s.Company, scope: scope}, true, nil
		}
		if err := c.await(ctx, ch); err != nil {
			return nil, false, fmt.Errorf("session %s is connected elsewhere: %w", own.ID, err)
		}
	}
}

// maxAttachLogTail is how many bytes of the runner's log (the end of it)
// an Attach error carries when the runner sent no hello.
const maxAttachLogTail = 2 << 10

// attachLogTailWait bounds reading the runner's log after Attach's
// deadline passed.
const attachLogTailWait = 5 * time.Second

// runnerLogTail returns "; runner log: " and the sanitized end of the
// runner's log (RunnerIngress.LogTail, at most maxAttachLogTail bytes), or
// a note of why there is none, for Attach's error when no hello came.
// After ctx's deadline it reads with a fresh one of attachLogTailWait; a
// cancelled ctx (the caller gave up) reads nothing.
func (c *Controller) runnerLogTail(ctx context.Context, in drivers.RunnerIngress, lease string) string {
	if errors.Is(ctx.Err(), context.Canceled) {
		return ""
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attachLogTailWait)
	defer cancel()
	b, err := in.LogTail(rctx, maxAttachLogTail)
	if err != nil {
		c.log.Info("controller: reading the runner's log", "lease", lease, "err", err)
		return "; the runner's log is unreadable"
	}
	if t := printableLog(b, maxAttachLogTail); t != "" {
		return "; runner log: " + t
	}
	return "; the runner's log is empty"
}

// printableLog returns the last at most max bytes of b as printable text:
// valid UTF-8, line breaks and tabs as spaces, every other control or
// invalid byte dropped, runs of spaces collapsed, trimmed. It starts with
// "..." when it cut something off the front.
func printableLog(b []byte, max int) string {
	var sb strings.Builder
	space := false
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		switch {
		case r == utf8.RuneError && n <= 1:
			continue
		case r == '\n' || r == '\r' || r == '\t' || r == ' ':
			space = sb.Len() > 0
			continue
		case !unicode.IsPrint(r):
			continue
		}
		if space {
			sb.WriteByte(' ')
			space = false
		}
		sb.WriteRune(r)
	}
	s := sb.String()
	if len(s) > max {
		cut := len(s) - max
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = "..." + s[cut:]
	}
	return s
}

// burnTicket uses up r, a resume ticket whose session is connected
// again: the runner that joined may be another than the one launched with
// r (a runner launched on a state directory another live runner holds
// nudges that one and exits without exchanging its ticket), and an unused
// ticket in the sandbox's reach must not stay good for its TTL (it would
// give a task the session's token and state key). A ticket used already
// is what is expected; other errors are logged.
func (c *Controller) burnTicket(ctx context.Context, r prp.TicketRecord) {
	_, err := c.o.Tickets.ConsumeTicket(ctx, r.Hash, r.Lease, r.Resume, time.Now().UTC())
	switch {
	case err == nil:
		c.log.Info("controller: a resume ticket nobody exchanged is used up", "lease", r.Lease, "session", r.Resume)
	case !errors.Is(err, prp.ErrTicketReplayed):
		c.log.Warn("controller: use up a resume ticket", "lease", r.Lease, "session", r.Resume, "err", err)
	}
}

// liveTicket returns the session of ticket r (the one its exchange created,
// or for a resume ticket the session it resumes) when its runner is
// connected to this controller, with its hello. A session some other
// ticket created never matches, whatever its lease and run.
func (c *Controller) liveTicket(r prp.TicketRecord) (string, prpwire.Hello, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Resume != "" {
		if c.live[r.Resume] != nil {
			return r.Resume, c.hellos[r.Resume], true
		}
		return "", prpwire.Hello{}, false
	}
	hash := r.Hash.String()
	for id, lc := range c.live {
		if lc.sess.Ticket == hash {
			return id, c.hellos[id], true
		}
	}
	return "", prpwire.Hello{}, false
}

// leaseEnded is the lease manager's LeaseEnded: the lease manager no longer
// holds the lease's sandbox in this process, so the ingress server of its
// attached runner is closed and its sessions' connections are dropped. It
// stops no task.
func (c *Controller) leaseEnded(lease string) {
	c.mu.Lock()
	a := c.attached[lease]
	delete(c.attached, lease)
	delete(c.runs, lease)
	var conns []*liveConn
	for _, lc := range c.live {
		if lc.sess.Lease == lease {
			conns = append(conns, lc)
		}
	}
	c.mu.Unlock()
	if a != nil {
		go a.close() // Serve returns promptly; LeaseEnded must not block
	}
	for _, lc := range conns {
		lc.ws.CloseNow()
	}
}

// closeAttachments closes every ingress server (Close).
func (c *Controller) closeAttachments() {
	c.mu.Lock()
	as := make([]*attachment, 0, len(c.attached))
	for id, a := range c.attached {
		as = append(as, a)
		delete(c.attached, id)
	}
	c.mu.Unlock()
	for _, a := range as {
		a.close()
	}
}

// RunnerSetFromFiles returns the drivers.RunnerSet of the runner binaries
// at paths (runnerbin.Spec), keyed by the architecture each one's ELF
// header names. A binary whose architecture is unknown, or two for one
// architecture, is an error naming the path.
func RunnerSetFromFiles(paths ...string) (*drivers.RunnerSet, error) {
	set := &drivers.RunnerSet{Binaries: map[string]drivers.RunnerSpec{}}
	for _, p := range paths {
		spec, err := runnerbin.Spec(p)
		if err != nil {
			return nil, err
		}
		if spec.Arch == "" {
			return nil, fmt.Errorf("controller: runner binary %q: not a Linux executable of a known architecture", spec.Binary)
		}
		if o, ok := set.Binaries[spec.Arch]; ok {
			return nil, fmt.Errorf("controller: runner binaries %q and %q are both for %s", o.Binary, spec.Binary, spec.Arch)
		}
		set.Binaries[spec.Arch] = spec
	}
	return set, nil
}

// Disconnect authorizes p on session and drops its runner's connection to
// this controller, if there is one (it reports whether there was). The
// runner is not stopped: it reconnects with its token and resumes (PRP-5);
// its tasks keep running. Operators and tests use it to force a resume.
func (c *Controller) Disconnect(ctx context.Context, p authz.Principal, session string) (bool, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	lc := c.live[s.ID]
	c.mu.Unlock()
	if lc == nil {
		return false, nil
	}
	lc.ws.CloseNow()
	return true, nil
}
