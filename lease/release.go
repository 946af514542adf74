package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// ReleaseOptions say how a lease ends. The zero ReleaseOptions let the
// lease's policy decide (ByPolicy): an ephemeral lease's sandbox is
// destroyed, a reusable lease's is stopped and kept resumable; nothing is
// left running unless Keep is asked for by name.
type ReleaseOptions struct {
	// Disposition says what happens to the sandbox (LEASE-6). The zero
	// value, like ByPolicy, lets the lease's policy decide; Keep leaves the
	// sandbox running (retained), Stop stops it and keeps it resumable
	// (released), Destroy removes it (released).
	Disposition Disposition
	// RunFailed says the run failed. A RetainOnFailure lease is then kept
	// (retained) whatever the disposition. Default false: the run
	// succeeded.
	RunFailed bool
	// Reason is recorded as the failure reason when RunFailed. Default
	// "": none recorded.
	Reason string
}

// Disposition says what a release does with a lease's sandbox: a host
// converts its own text ("policy", "keep", "stop", "destroy") to one. The
// zero value, "", is ByPolicy too; Release refuses any other value with an
// error wrapping errcode.ErrInvalid. The stored record keeps the driver's
// disposition (Lease.CleanupDisposition, a drivers.Disposition), never
// this one.
type Disposition string

// The dispositions of a release.
const (
	// ByPolicy lets the lease's policy decide: an Ephemeral or
	// RetainOnFailure lease is destroyed (a failed run of a
	// RetainOnFailure lease is kept), a reusable lease
	// (ReuseByEnvironment, ReuseByWorkspace) is stopped and kept
	// resumable when its driver can resume it (drivers.CapReuse), else
	// kept running.
	ByPolicy Disposition = "policy"
	// Keep leaves the sandbox running: the lease is retained for 7 days
	// and may be acquired again or swept.
	Keep Disposition = "keep"
	// Stop stops the sandbox and keeps it resumable (host drivers: ends
	// the session).
	Stop Disposition = "stop"
	// Destroy removes the sandbox at the provider (host drivers: ends the
	// session).
	Destroy Disposition = "destroy"
)

// driverDisposition returns what releasing l with d does to the sandbox
// of driver drv (see ByPolicy).
func driverDisposition(d Disposition, l *Lease, drv drivers.Driver) drivers.Disposition {
	switch d {
	case Keep:
		return drivers.Keep
	case Stop:
		return drivers.Stop
	case Destroy:
		return drivers.Destroy
	}
	if !l.Policy.reusable() {
		return drivers.Destroy
	}
	if drv != nil && drivers.Effective(drv, 0).Has(drivers.CapReuse) {
		return drivers.Stop
	}
	return drivers.Keep
}

// Release ends the active (or retained) lease id. A confirmed release
// names its evidence (Lease.CleanupEvidenceKind: provider, cgroup or
// tag_scan; the runner's own proofs, runner_attested, are recorded in the
// evidence text but never end a lease alone); a kept lease's
// CleanupEvidence says that nothing was stopped. It uses the live handle
// when this manager acquired the lease, else drivers.Destroyer by provider
// lease id. A host lease (local, ssh) ends only through the live session of
// its holder: released by another manager it is left pending_cleanup
// naming the holder, never confirmed, and the holder's own Release of it
// then ends the session and records its receipt (holder.go). A stop or destroy counts only when the provider's receipt proves
// it for the lease's provider lease id (LEASE-7); otherwise the lease is
// left pending_cleanup with the reason, and the error wraps
// ErrCleanupPending; releasing a pending_cleanup lease retries its cleanup
// (with proof, as a Sweep does). Releasing a lease that already ended returns it
// unchanged with a nil error, except that drivers.Destroy on a released
// reusable lease whose stopped sandbox is still resumable destroys that
// sandbox (with proof) and ends the reuse. Before a stop or destroy the
// lease is written to expire with the release's claim, so that a release
// whose final write fails leaves the lease to the next Sweep after the
// claim (it destroys with proof) instead of active until its TTL. It returns the lease as stored
// afterwards, as Get shows it to p.
//
// p must be allowed authz.ActionLease on the lease (instance admins,
// local operators, and principals of the lease's company that may lease,
// under DefaultPolicy). A lease p may not read is refused as a missing one
// (errcode.ErrNotFound, the same text); one it may read but not release (a board
// member of its company) with errcode.ErrDenied; both name only the
// id.
func (m *Manager) Release(ctx context.Context, p authz.Principal, id string, opts ReleaseOptions) (*Lease, error) {
	if _, err := m.load(ctx, p, authz.ActionLease, id); err != nil {
		return nil, err
	}
	l, err := m.release(ctx, id, opts)
	m.afterRelease(ctx, l)
	if l != nil {
		l = m.view(ctx, p, l)
	}
	return l, err
}

// afterRelease tells the Sources' Ended hook of the lease a release
// returned (a copy), so that what lives in its sandbox (workspaces) ends
// with it.
func (m *Manager) afterRelease(ctx context.Context, l *Lease) {
	if m.ended != nil && l != nil {
		m.ended(context.WithoutCancel(ctx), l.clone())
	}
}

// keptEvidence is the receipt of a keep release.
const keptEvidence = "kept: no task was stopped; the sandbox and its processes keep running (nothing proven)"

// claimerForRelease returns the manager's store as a releaseClaimer, or nil.
func (m *Manager) claimerForRelease() releaseClaimer {
	if rs, ok := m.store.(*recordStore); ok {
		if rc, ok := rs.Store.(releaseClaimer); ok {
			return rc
		}
	}
	return nil
}

// release is Release without authorization. The lease it returns is a
// struct nobody else holds (a Store's copy, or this call's version of
// one), whose maps are the store's: Release and Handle.Release make it the
// caller's with view or own.
func (m *Manager) release(ctx context.Context, id string, opts ReleaseOptions) (*Lease, error) {
	switch opts.Disposition {
	case "", ByPolicy, Keep, Stop, Destroy:
	default:
		return nil, fmt.Errorf("lease %s: release: unknown disposition %q (policy, keep, stop or destroy): %w", id, opts.Disposition, errcode.ErrInvalid)
	}
	now := m.now()
	owner := m.opOwner()
	// A release that will stop or destroy writes ahead, in its claim when
	// the store can (releaseClaimer), that the lease expires with the
	// claim (see below). A failed run may turn into a keep
	// (RetainOnFailure), which writes nothing ahead.
	var l *Lease
	var err error
	aheadDone := false
	if rc := m.claimerForRelease(); rc != nil && (opts.Disposition == Stop || opts.Disposition == Destroy) && !opts.RunFailed {
		l, err = rc.ClaimLeaseForRelease(ctx, id, owner, now, now.Add(m.o.knobs.CleanupBudget))
		aheadDone = err == nil && (l.Status == StatusActive || l.Status == StatusRetained)
	} else {
		l, err = m.store.ClaimLease(ctx, id, owner, now, now.Add(m.o.knobs.CleanupBudget))
	}
	if errors.Is(err, ErrClaimed) {
		return l, fmt.Errorf("lease %s: cannot release now: %w", id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lease %s: release: %w", id, err)
	}
	switch {
	case l.Status == StatusActive, l.Status == StatusRetained:
	case l.Status == StatusReleased && l.holdsSandbox() && opts.Disposition == Destroy && !opts.RunFailed:
		// A stopped, resumable sandbox of a reusable lease: destroying it
		// ends the reuse (and unblocks deleting its environment, CFG-7).
	case l.Status == StatusReleased, l.Status == StatusExpired, l.Status == StatusFailed:
		m.unclaim(ctx, l, "")
		if h := m.liveHandle(id); h != nil {
			// Another manager ended the lease (with proof); free what this
			// process still holds of it (a host session's connection).
			if _, err := h.sandbox.Release(ctx, drivers.Destroy); err != nil {
				m.o.logger.Info("lease: freeing the handle of a lease ended elsewhere", "lease", id, "err", err)
			}
		}
		m.dropHandle(id)
		return m.store.GetLease(ctx, id)
	case l.Status == StatusPendingCleanup:
		// Retry the owed cleanup now, as a sweep would. When this manager
		// holds the session (a host lease another manager released), its
		// handle ends it with the session's receipt.
		return m.cleanup(ctx, l)
	default:
		m.unclaim(ctx, l, "")
		return l, fmt.Errorf("lease %s is %s; it can be released once it is active: %w", id, l.Status, errcode.ErrConflict)
	}
	drv, err := m.reg.Lookup(l.Provider)
	if err != nil {
		m.unclaim(ctx, l, "")
		return l, fmt.Errorf("lease %s: release: %w", id, err)
	}
	d := driverDisposition(opts.Disposition, l, drv)
	if l.Policy == RetainOnFailure && opts.RunFailed {
		d = drivers.Keep
	}
	var sb drivers.Sandbox
	if h := m.liveHandle(id); h != nil {
		sb = h.sandbox
	}
	wctx := detach(ctx)
	expires := l.ExpiresAt
	if d != drivers.Keep && !aheadDone {
		// Write ahead: the lease expires when this release's claim does, so
		// that if the final write below fails (even after the store's
		// retries) the next sweep after the claim takes the lease and
		// destroys its sandbox with proof, instead of the lease staying
		// active until its TTL (LEASE-6, LEASE-9).
		ahead := l.shallow()
		ahead.ExpiresAt = l.ClaimedUntil
		if err := m.store.UpdateLease(wctx, ahead); err != nil {
			m.unclaim(ctx, l, "")
			return l, fmt.Errorf("lease %s: release: recording the release: %w", id, err)
		}
		l = ahead
	}
	// This release's version is written over l, which is this call's own
	// (the claim's copy; a Store returns copies): from here on it is upd,
	// and claimed keeps it as stored for the returns of a write that
	// fails.
	claimed := *l
	upd := l
	upd.ExpiresAt = expires
	upd.ClaimedBy, upd.ClaimedUntil, upd.RunKey = "", time.Time{}, ""
	if opts.RunFailed && opts.Reason != "" {
		upd.FailureReason = opts.Reason
	}
	if d == drivers.Keep {
		if sb != nil {
			// Frees the handle's local resources; the sandbox keeps running.
			if _, err := sb.Release(ctx, drivers.Keep); err != nil {
				m.o.logger.Info("lease: releasing a kept handle", "lease", id, "err", err)
			}
		}
		upd.Status, upd.LastUsedAt, upd.ExpiresAt = StatusRetained, now, now.Add(m.o.knobs.ResumableTTL)
		upd.CleanupEvidence, upd.CleanupEvidenceKind = keptEvidence, drivers.EvidenceNone
		m.dropHandle(id)
		if err := m.store.UpdateLease(wctx, upd); err != nil {
			return stored(claimed), fmt.Errorf("lease %s: recording retained: %w", id, err)
		}
		return upd, nil
	}
	// The runner's tasks first (PRP-6): an unproven stop leaves the
	// sandbox as it is and the lease pending_cleanup with the reason; the
	// handle stays, so that the retry (a Sweep, a second Release) can ask
	// the runner again or end the sandbox with its own proof.
	runnerEv, runners, serr := m.stopTasks(ctx, upd)
	var hostKind drivers.EvidenceKind
	if serr == nil {
		runnerEv, hostKind, serr = m.endRunners(ctx, drv, sb, upd, runners, runnerEv)
	}
	if serr != nil {
		pending, ok := m.markPending(wctx, upd, d, StatusReleased, serr.Error())
		if !ok {
			return stored(claimed), fmt.Errorf("lease %s: %w: %w (and recording it failed)", id, ErrCleanupPending, serr)
		}
		return pending, fmt.Errorf("lease %s: %w: %w", id, ErrCleanupPending, serr)
	}
	rc, terr := m.terminate(ctx, drv, upd, sb, d, true)
	proven, evidence, kind, perr := proof(rc, terr, upd.ProviderLeaseID, d)
	kind = strongerEvidence(kind, hostKind)
	evidence = withCaveat(withRunner(runnerEv, evidence), kind)
	m.dropHandle(id)
	if !proven {
		pending, ok := m.markPending(wctx, upd, d, StatusReleased, perr.Error())
		if !ok {
			return stored(claimed), fmt.Errorf("lease %s: %w: %w (and recording it failed)", id, ErrCleanupPending, perr)
		}
		return pending, fmt.Errorf("lease %s: %w: %w", id, ErrCleanupPending, perr)
	}
	now = m.now()
	upd.Status, upd.Cleanup, upd.CleanupEvidence, upd.ReleasedAt, upd.LastUsedAt = StatusReleased, cleanupConfirmed, evidence, now, now
	upd.CleanupEvidenceKind = kind
	if d == drivers.Stop && upd.Policy.reusable() && rc.State == drivers.StateStopped {
		upd.ExpiresAt = now.Add(m.o.knobs.ResumableTTL) // resumable until then
	} else {
		upd.ReuseKey = ""
	}
	if err := m.store.UpdateLease(wctx, upd); err != nil {
		return stored(claimed), fmt.Errorf("lease %s: sandbox %s %s (confirmed) but recording it failed: %w", id, upd.ProviderLeaseID, d, err)
	}
	return upd, nil
}

// stored returns a pointer to a copy of l: the lease as stored, which a
// release returns when it could not record its outcome.
func stored(l Lease) *Lease { return &l }
