package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/lease"
)

// LeaseReader is the controller's view of the lease records (New's
// leases): a ticket's company is the lease's recorded company,
// and a session lives no longer than its lease (every connect and every
// token renewal reads the lease). It reads one record and changes
// nothing. lease.Store has this method; berth.New passes a read-only
// adapter over the system's lease store, so that every
// replica on one store sees the same records.
type LeaseReader interface {
	// GetLease returns the lease id, or an error wrapping
	// errcode.ErrNotFound.
	GetLease(ctx context.Context, id string) (*lease.Lease, error)
}

// errLeaseOver: a session's lease is no longer active (released, expired,
// failed, retained, pending cleanup, past its expiry, or gone), so the
// session is over.
var errLeaseOver = errors.New("the session's lease is no longer active")

// notFound is the refusal for a record p may not read and for a missing
// one alike (one sentinel, one text): it names the kind and the id the
// caller gave, nothing else.
func notFound(kind, id string) error {
	return fmt.Errorf("controller: %s %q: %w", kind, id, errcode.ErrNotFound)
}

// leaseResource describes the lease of a session or ticket for
// authorization.
func leaseResource(id, company string) authz.Resource {
	return authz.Resource{Kind: authz.ResourceKindLease, ID: id, Company: company}
}

// authorizeRecord decides authz.ActionLease on r for p, where the
// caller named a record (kind id) that stands on r: a principal who may
// neither act on r nor read it (authz.ActionRead) gets notFound, as
// for a missing record; one who may read it but not act on it gets a
// refusal wrapping errcode.ErrDenied that names only the id.
func (c *Controller) authorizeRecord(ctx context.Context, p authz.Principal, r authz.Resource, kind, id string) error {
	if c.o.Authorizer.Authorize(ctx, p, authz.ActionLease, r) == nil {
		return nil
	}
	if c.o.Authorizer.Authorize(ctx, p, authz.ActionRead, r) != nil {
		return notFound(kind, id)
	}
	return fmt.Errorf("controller: %s %q: %s may not %s it: %w", kind, id, p, authz.ActionLease, errcode.ErrDenied)
}

// leaseFor reads lease id from the lease records and authorizes p on it
// (authorizeRecord): a missing lease and one p may not read are the same
// not found.
func (c *Controller) leaseFor(ctx context.Context, p authz.Principal, id string) (*lease.Lease, error) {
	l, err := c.leases.GetLease(ctx, id)
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, notFound("lease", id)
	}
	if err != nil {
		return nil, fmt.Errorf("controller: lease %q: %w", id, err)
	}
	if err := c.authorizeRecord(ctx, p, leaseResource(l.ID, l.Company), "lease", id); err != nil {
		return nil, err
	}
	return l, nil
}

// leaseEnd reports whether l may have live runner sessions at now (it is
// active and not past its expiry) and until when (zero: no expiry).
func leaseEnd(l *lease.Lease, now time.Time) (time.Time, bool) {
	if l.Status != lease.StatusActive || !l.ExpiresAt.IsZero() && !now.Before(l.ExpiresAt) {
		return time.Time{}, false
	}
	return l.ExpiresAt, true
}

// sessionLease reads the lease of s from the lease records and returns
// until when s may live (zero: no end). A lease that is no longer active,
// is missing, or belongs to another company than s is an error wrapping
// errLeaseOver; a failed read is returned as it is.
func (c *Controller) sessionLease(ctx context.Context, s Session, now time.Time) (time.Time, error) {
	l, err := c.leases.GetLease(ctx, s.Lease)
	switch {
	case errors.Is(err, errcode.ErrNotFound):
		return time.Time{}, fmt.Errorf("session %s: lease %s is gone: %w", s.ID, s.Lease, errLeaseOver)
	case err != nil:
		return time.Time{}, fmt.Errorf("session %s: read lease %s: %w", s.ID, s.Lease, err)
	case s.Company == authz.InstanceCompany:
		return poolSessionLease(s, l, now)
	case l.Company != s.Company:
		return time.Time{}, fmt.Errorf("session %s: lease %s is not the session's company's: %w", s.ID, s.Lease, errLeaseOver)
	}
	end, ok := leaseEnd(l, now)
	if !ok {
		return time.Time{}, fmt.Errorf("session %s: lease %s is %s: %w", s.ID, s.Lease, l.Status, errLeaseOver)
	}
	return end, nil
}

// renewal is the writer's token renewal for a task session whose token
// expires at expiry: it reads the session's lease and mints a token that
// lasts the token TTL but never past the lease's end. It returns the new
// token ("" when the lease's end is the current expiry, so there is
// nothing to renew yet), its claims and when to try the next renewal. An
// ended lease is an error wrapping errLeaseOver (the connection ends); a
// failed lease read is retried at the next poll.
func (lc *liveConn) renewal(ctx context.Context, sess Session, claims prpwire.Claims, expiry time.Time) (string, prpwire.Claims, time.Time, error) {
	c := lc.c
	now := time.Now()
	end, err := c.sessionLease(ctx, sess, now)
	if errors.Is(err, errLeaseOver) {
		return "", prpwire.Claims{}, time.Time{}, err
	}
	if err != nil {
		c.log.Warn("controller: token renewal: lease unreadable; retrying", "session", sess.ID, "err", err)
		return "", prpwire.Claims{}, now.Add(c.o.Poll), nil
	}
	exp := c.x.RenewedExpiry(now.UTC(), end)
	// At the next half life; near the lease's end (a capped token) every
	// eighth of the TTL, and at the end itself, so that a lease extended
	// meanwhile is followed and an ended one ends the connection.
	next := exp.Add(-c.o.tokenTTL / 2)
	if !next.After(now) {
		next = now.Add(c.o.tokenTTL / 8)
		if !end.IsZero() && end.Before(next) {
			next = end
		}
	}
	if !exp.After(expiry) {
		return "", prpwire.Claims{}, next, nil
	}
	tok, cl, err := c.x.Renew(claims, now.UTC(), end)
	if err != nil {
		return "", prpwire.Claims{}, time.Time{}, err
	}
	return tok, cl, next, nil
}

// connectLease checks at connect that the session's lease is still
// active in the lease records (on whichever replica the lease ended) and
// answers the refusal itself: 401 "lease_ended" for a session whose lease
// is over (the runner stops), 503 when the records cannot be read (it
// retries). It reports whether the connection may go on, and until when
// the lease lasts (zero: no end).
func (c *Controller) connectLease(w http.ResponseWriter, r *http.Request, s Session) (time.Time, bool) {
	end, err := c.sessionLease(r.Context(), s, time.Now())
	switch {
	case err == nil:
		return end, true
	case errors.Is(err, errLeaseOver):
		c.log.Info("controller: connect refused", "session", s.ID, "err", err)
		writeJSON(w, http.StatusUnauthorized, prpwire.ErrorResponse{Code: prpwire.CodeLeaseEnded, Message: "the lease of session " + s.ID + " is no longer active"})
	default:
		c.log.Warn("controller: connect: lease unreadable", "session", s.ID, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, prpwire.ErrorResponse{Code: prpwire.CodeUnavailable, Message: "the lease records cannot be read now"})
	}
	return time.Time{}, false
}
