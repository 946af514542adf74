package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/lease"
)

// Warm-pool runners (the berth.pool label, issue 31). A member of a runner
// pool starts with its runner launched and connected, so that the first
// task of the lease that adopts it starts on a connected runner. The
// rule that keeps the runner protocol's guarantees:
//
//   - The member's session is created from a ticket minted for the
//     member's record: the instance's (authz.InstanceCompany), for the run
//     poolRun names, no run of any tenant. A session of the instance runs
//     no command (dispatch refuses it, the writer sends none).
//   - The lease that adopts the member (one store transaction,
//     lease.Store.AdoptPooled) takes the session over in its Attach: one
//     conditional store update (Store.HandOverSession) gives it the
//     lease's company and run, once; a second adopter never gets it, and
//     an adopted member never serves a second lease (its record is that
//     lease's until it ends).
//   - The connection's writer, wherever the runner is connected, renews
//     the runner's token with those claims at once (a TypeToken that
//     carries the new run) before it sends any command of the session:
//     the runner accepts commands for the lease's run only from then on.

// poolRun is the run of a warm-pool member's runner session before its
// hand-over. Runs that start with prp.PoolRunPrefix are the instance's:
// no principal names one (Attach, MintTicket refuse it), and no session
// is handed over to one (Store.HandOverSession), so a tenant's runner
// never holds a run whose runner takes a renewal for another run.
func poolRun(leaseID string) string { return prp.PoolRunPrefix + leaseID }

// tenantRun refuses run when it is a warm-pool member's (poolRun's
// prefix): field names the request field, for the error.
func tenantRun(field, run string) error {
	if strings.HasPrefix(run, prp.PoolRunPrefix) {
		return fmt.Errorf("field %s %q: runs that start with %q are reserved for warm-pool members: %w", field, run, prp.PoolRunPrefix, errcode.ErrInvalid)
	}
	return nil
}

// notInstanceSession refuses s when it is the instance's (a warm-pool
// member's, not handed over): the calls that authorize once and then wait
// (follow, wait) never wait on one. No command runs on such a session, and
// once the lease that adopted the member takes it over it is that lease's
// company's: a wait authorized while it was the instance's (a principal
// with rights on the instance only) would otherwise go on reading the
// adopting company's events and results.
func notInstanceSession(s Session) error {
	if s.Company == authz.InstanceCompany {
		return fmt.Errorf("controller: session %s is a warm-pool member's, which runs nothing until a lease adopts it: %w", s.ID, prp.ErrScopeDenied)
	}
	return nil
}

// labelPool is the label, valued "member", on the record of every
// warm-pool member and of the lease that adopted one (lease.Lease.Labels).
const labelPool = "berth.pool"

// poolMember reports whether l is the record of a warm-pool member that
// no lease adopted (yet).
func poolMember(l *lease.Lease) bool {
	return l.Company == authz.InstanceCompany && l.Labels[labelPool] == "member" &&
		(l.Status == lease.StatusStarting || l.Status == lease.StatusPooled)
}

// storedLease returns the stored record of h's lease, for the calls that
// act for no principal (the lease manager's pool hooks). Decisions read
// the record, never h.Lease(), which is redacted for a principal who may
// not read configs: no labels, so no pool mark (issue 49).
func (c *Controller) storedLease(ctx context.Context, h *lease.Handle) (*lease.Lease, error) {
	l, err := c.leases.GetLease(ctx, h.ID())
	if err != nil {
		return nil, fmt.Errorf("read the lease record: %w", err)
	}
	return l, nil
}

// adoptedMember reports whether l is a lease that adopted a warm-pool
// member (its record is the member's).
func adoptedMember(l *lease.Lease) bool {
	return l.Company != authz.InstanceCompany && l.Labels[labelPool] == "member"
}

// poolSessionLease is sessionLease for s, a session of the instance (a
// warm-pool member's runner): it lives while the member waits, starting
// or pooled, until the member's max age, and, once a lease adopted the
// member, until that lease ends or its Attach takes the session over (no
// command runs on it meanwhile).
func poolSessionLease(s Session, l *lease.Lease, now time.Time) (time.Time, error) {
	switch {
	case l.Labels[labelPool] != "member":
		return time.Time{}, fmt.Errorf("session %s: lease %s is no warm-pool member's: %w", s.ID, s.Lease, errLeaseOver)
	case poolMember(l):
		if !l.ExpiresAt.IsZero() && !now.Before(l.ExpiresAt) {
			return time.Time{}, fmt.Errorf("session %s: pool member %s is past its max age: %w", s.ID, s.Lease, errLeaseOver)
		}
		return l.ExpiresAt, nil
	case l.Company == authz.InstanceCompany:
		return time.Time{}, fmt.Errorf("session %s: pool member %s is %s: %w", s.ID, s.Lease, l.Status, errLeaseOver)
	case l.Status == lease.StatusStarting:
		return time.Time{}, nil // adopted, being started
	}
	end, ok := leaseEnd(l, now)
	if !ok {
		return time.Time{}, fmt.Errorf("session %s: lease %s is %s: %w", s.ID, s.Lease, l.Status, errLeaseOver)
	}
	return end, nil
}

// startPoolRunner is the lease manager's StartPoolRunner: it serves this
// controller on the ingress of h, a starting member of a runner pool,
// mints a one-use holder ticket of the instance for the member's record
// (run poolRun), launches the runner and returns once its hello came on
// the session of that ticket. ctx (the member's startup budget) bounds
// it; on failure the ingress is closed again and the lease manager
// destroys the member. It acts for no principal: it is not an entry point
// (taskStopper).
func (c *Controller) startPoolRunner(ctx context.Context, h *lease.Handle) error {
	fail := func(err error) error {
		return fmt.Errorf("controller: start the runner of pool member %s: %w", h.ID(), err)
	}
	l, err := c.storedLease(ctx, h)
	if err != nil {
		return fail(err)
	}
	switch {
	case l.Runner == nil:
		return fail(fmt.Errorf("the member was made without a runner: %w", drivers.ErrUnsupported))
	case !poolMember(l):
		return fail(errors.New("the lease is not a warm-pool member of the instance"))
	}
	if err := c.admitLease(ctx, l, h); err != nil {
		return fail(err)
	}
	if err := c.launchPoolRunner(ctx, h, l, poolRun(l.ID), ""); err != nil {
		return fail(err)
	}
	return nil
}

// launchPoolRunner serves this controller on the ingress of h, a warm-pool
// member whose stored record is l, mints a one-use holder ticket of the instance for run (a resume
// ticket of session resume, if not empty), launches the runner with it
// and returns once the ticket's session is connected here; on failure the
// ingress is closed again.
func (c *Controller) launchPoolRunner(ctx context.Context, h *lease.Handle, l *lease.Lease, run, resume string) error {
	in, detach, err := c.serve(ctx, h, l, true)
	if err != nil {
		return err
	}
	t, rec, err := c.mintFor(ctx, l, TicketRequest{Lease: l.ID, Run: run, Scope: prp.ScopeTask, TTL: prpwire.MaxTicketTTL}, resume, true)
	if err == nil {
		err = in.Launch(ctx, drivers.RunnerLaunch{Lease: l.ID, Ticket: t.String()})
	}
	if err == nil {
		_, _, err = c.awaitHello(ctx, h, in, rec)
	}
	if err != nil {
		detach()
	}
	return err
}

// poolSession returns the runner session of the warm-pool member lease
// (the instance's, for its pool run), or nil.
func (c *Controller) poolSession(ctx context.Context, leaseID string) (*Session, error) {
	ss, err := c.o.Store.LeaseSessions(ctx, leaseID)
	if err != nil {
		return nil, err
	}
	for i := len(ss) - 1; i >= 0; i-- {
		if s := ss[i]; s.Company == authz.InstanceCompany && s.Holder && s.Scope == prp.ScopeTask && s.Run == poolRun(leaseID) {
			return &s, nil
		}
	}
	return nil, nil
}

// poolRunnerConnected is the lease manager's PoolRunnerConnected: whether
// the runner of the pooled member lease is connected (to any replica) or
// served by an ingress of this process. A member without a pool session
// reports true: there is nothing to reconnect.
func (c *Controller) poolRunnerConnected(ctx context.Context, leaseID string) (bool, error) {
	c.mu.Lock()
	served := c.attached[leaseID] != nil
	c.mu.Unlock()
	if served {
		return true, nil
	}
	s, err := c.poolSession(ctx, leaseID)
	if err != nil || s == nil {
		return true, err
	}
	return s.ConnectedUntil.After(time.Now()), nil
}

// reconnectPoolRunner is the lease manager's ReconnectPoolRunner: for h, a
// pooled member that another process started (its runner's ingress went
// with that process), it serves this controller on h's ingress and
// launches a runner with a resume ticket of the member's session. The
// member's own runner, alive on its state directory, is nudged by that
// launch to reconnect at once (the launched one exits: one runner per
// state directory); a runner that is gone is replaced by the launched one,
// which resumes the session. It returns once the session's runner is
// connected here; ctx (the member's startup budget) bounds it, and on
// failure the ingress is closed again.
func (c *Controller) reconnectPoolRunner(ctx context.Context, h *lease.Handle) error {
	fail := func(err error) error {
		return fmt.Errorf("controller: reconnect the runner of pool member %s: %w", h.ID(), err)
	}
	l, err := c.storedLease(ctx, h)
	if err != nil {
		return fail(err)
	}
	if l.Runner == nil || !poolMember(l) || l.Status != lease.StatusPooled {
		return fail(errors.New("the lease is not a pooled runner member of the instance"))
	}
	if err := c.admitLease(ctx, l, h); err != nil {
		return fail(err)
	}
	s, err := c.poolSession(ctx, l.ID)
	if err != nil {
		return fail(err)
	}
	if s == nil {
		return fail(errors.New("the member has no runner session"))
	}
	if err := c.launchPoolRunner(ctx, h, l, s.Run, s.ID); err != nil {
		return fail(err)
	}
	return nil
}

// handOver gives the instance's runner session of l, a lease that adopted
// a warm-pool member, to l's company and run (Store.HandOverSession):
// Attach's first step on such a lease. It reports whether there was a
// session to take over; none (a member whose runner never connected) is
// no error: Attach then launches a runner as for any lease.
func (c *Controller) handOver(ctx context.Context, l *lease.Lease, run string) (bool, error) {
	s, err := c.poolSession(ctx, l.ID)
	if err != nil || s == nil {
		return false, err
	}
	ok, err := c.o.Store.HandOverSession(ctx, s.ID, l.Company, run)
	if err != nil {
		return false, fmt.Errorf("handing session %s over to the lease: %w", s.ID, err)
	}
	if ok {
		c.log.Info("controller: pool member's runner session handed over", "session", s.ID, "lease", l.ID, "run", run)
		c.notify(s.ID) // the writer renews the token before any command
	}
	return ok, nil
}

// handedOverFrom reports whether claims are the pool token of s's lease
// (the instance's, run poolRun) and s was handed over since: a runner that
// missed its renewal (it was disconnected, or its host restarted) connects
// with them, and the writer renews them before any command.
func handedOverFrom(s Session, claims prpwire.Claims) bool {
	return claims.Company == authz.InstanceCompany && claims.Run == poolRun(s.Lease) &&
		s.Company != authz.InstanceCompany && s.Holder && s.Scope == prp.ScopeTask
}

// handedOver is the writer's check, for a runner that holds the token of
// a session of the instance (a warm-pool member's), of whether the lease
// that adopted the member took the session over. When it did, the runner's token is renewed at once
// with the session's new company and run, in a TypeToken that carries the
// run, before the writer sends any command; it returns the session and
// claims as they are now and ok. A failed read is logged and tried again
// at the next wake; an ended lease is an error wrapping errLeaseOver.
func (lc *liveConn) handedOver(ctx context.Context, sess Session, acked uint64) (Session, prpwire.Claims, bool, error) {
	c := lc.c
	ns, err := c.o.Store.GetSession(ctx, sess.ID)
	if err != nil {
		c.log.Warn("controller: pool session unreadable; retrying", "session", sess.ID, "err", err)
		return sess, prpwire.Claims{}, false, nil
	}
	if ns.Company == authz.InstanceCompany {
		return sess, prpwire.Claims{}, false, nil
	}
	if ns.Lease != sess.Lease || ns.Scope != sess.Scope {
		return sess, prpwire.Claims{}, false, fmt.Errorf("session %s changed its lease or scope: %w", sess.ID, errLeaseOver)
	}
	now := time.Now()
	end, err := c.sessionLease(ctx, ns, now)
	if err != nil {
		return sess, prpwire.Claims{}, false, err
	}
	cl := prpwire.Claims{Lease: ns.Lease, Run: ns.Run, Company: ns.Company, Scope: ns.Scope, Session: ns.ID}
	tok, cl, err := c.x.Renew(cl, now.UTC(), end)
	if err != nil {
		return sess, prpwire.Claims{}, false, err
	}
	if err := lc.send(ctx, prpwire.TypeToken, 0, acked, prpwire.TokenRenewal{Token: tok, ExpiresAt: cl.ExpiresAt, Run: ns.Run}); err != nil {
		return sess, prpwire.Claims{}, false, err
	}
	c.handovers.Add(1)
	return ns, cl, true, nil
}
