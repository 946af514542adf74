package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/retry"
	"github.com/berthdev/berth/internal/secretcfg"
)

// stopRetry marks an attempt error after which no further attempt may run.
type stopRetry struct{ err error }

func (s *stopRetry) Error() string { return s.err.Error() }
func (s *stopRetry) Unwrap() error { return s.err }

// creation is the state of one create shared with the Allocated callback.
type creation struct {
	mu        sync.Mutex
	cur       *Lease // the stored record, latest version
	pid       string // allocated and not proven gone
	recordErr error  // recording pid failed
}

// snapshot returns the stored record, the allocated id and the recording
// error. The record is read-only for the caller, who copies it before it
// changes anything; it stays unchanged until the next attempt's Acquire
// (Allocated writes over it) or discardAllocated (which swaps in a copy).
func (c *creation) snapshot() (*Lease, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur, c.pid, c.recordErr
}

// create asks the driver for a sandbox for the starting lease l, which the
// store holds (write-ahead, LEASE-2), within the startup budget (LEASE-3).
func (m *Manager) create(ctx context.Context, a *acq, l *Lease) (*Handle, error) {
	st := &creation{cur: l}
	wctx := a.detached // store writes outlive the budget
	if wctx == nil {
		wctx = detach(ctx)
	}
	if m.o.secretKeeper != nil && len(secretcfg.SecretRefs(l.Config)) > 0 {
		// The secrets were resolved before the record (and its secret
		// uses) was written; a catalog that retired them in between may
		// have deleted them. Resolve again now that the uses hold them, so
		// that no sandbox is made whose cleanup could not resolve its
		// credentials (CFG-7, LEASE-9).
		if _, err := m.resolveConfig(ctx, a.drv, l.Config); err != nil {
			return nil, m.failStart(wctx, a, l, "", nil, fmt.Errorf("its secrets were retired while it started: %w", err))
		}
	}
	allocated := func(actx context.Context, id string) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		// The version with the provider's id is written over cur, this
		// creation's own copy (a Store copies what it is given): a driver
		// calls Allocated within Acquire (drivers.AcquireRequest), and
		// nothing reads cur until Acquire returns. A refused write puts
		// it back as stored.
		prev := *st.cur
		st.cur.ProviderLeaseID = id
		st.pid = id
		// The record of an allocated sandbox must land even when the budget
		// ends meanwhile (else nothing points at it): the write keeps the
		// driver's context values but not its cancellation.
		if err := m.store.UpdateLease(detach(actx), st.cur); err != nil {
			*st.cur = prev
			st.recordErr = err
			return fmt.Errorf("lease %s: recording provider lease id %s: %w", l.ID, id, err)
		}
		return nil
	}
	bctx := m.withBudget(ctx, m.now().Add(a.budget))
	defer bctx.cancel()
	policy := m.retryPolicy()
	policy.Retryable = func(err error) bool {
		var s *stopRetry
		return !errors.As(err, &s) && retry.IsTransient(err)
	}
	var sb drivers.Sandbox
	err := retry.Do(bctx, policy, func(actx context.Context, _ int) error {
		s, err := a.drv.Acquire(actx, a.cfg, drivers.AcquireRequest{
			LeaseID: l.ID, Labels: l.Labels, Workspace: a.req.Workspace, Allocated: allocated, Runner: a.runner,
			Warm: a.member && a.runner == nil, // a runner pool's first command is a task, not an exec
		})
		if err == nil {
			sb = s
			return nil
		}
		_, pid, rerr := st.snapshot()
		switch {
		case rerr != nil:
			return &stopRetry{err}
		case pid == "" || !retry.IsTransient(err) || bctx.Err() != nil:
			return err
		}
		// A transient failure after the provider allocated a sandbox: remove
		// it before another attempt, so the record never points away from a
		// sandbox that may still exist.
		if !m.discardAllocated(wctx, a, st) {
			return &stopRetry{err}
		}
		return err
	})
	budgetOut := errors.Is(bctx.Err(), context.DeadlineExceeded)
	cur, pid, rerr := st.snapshot()
	if err == nil && rerr == nil && a.member && a.runner != nil {
		// A runner pool's member starts with its runner launched and
		// connected (pool.go), within what is left of the startup budget.
		if cur, err = m.startPoolRunner(bctx, wctx, a, cur, sb); err != nil {
			return nil, m.failStart(wctx, a, cur, sb.ID(), sb, err)
		}
	}
	now := m.now()
	if err == nil {
		// The started version is written over cur, the latest version this
		// creation made: once the driver has returned nothing else reads
		// it (a Store copies what it is given), so it needs no copy of its
		// own; a refused write puts cur back for failStart.
		prev := *cur
		upd := cur
		// Drivers that never call Allocated (host sessions) are recorded here.
		upd.ProviderLeaseID = sb.ID()
		upd.Status, upd.LastUsedAt, upd.ExpiresAt, upd.Uses = StatusActive, now, m.expiry(a, now), 1
		if a.member {
			// A warm-pool member waits for adoption (pool.go): it ages by
			// the pool's max age, which the pool pass enforces.
			upd.Status, upd.ExpiresAt, upd.Uses = StatusPooled, time.Time{}, 0
			if p := a.env.Pool; p != nil && p.MaxAge > 0 {
				upd.ExpiresAt = now.Add(p.MaxAge)
			}
		}
		upd.ClaimedBy, upd.ClaimedUntil = "", time.Time{}
		host := a.drv.Capabilities().Kind == drivers.KindHost
		if host {
			m.hold(upd, now) // the session lives in this process (holder.go)
		}
		if uerr := m.store.UpdateLease(wctx, upd); uerr != nil {
			*cur = prev
			return nil, m.failStart(wctx, a, cur, pid, sb, fmt.Errorf("recording the started sandbox: %w", uerr))
		}
		h := &Handle{m: m, lease: upd, driver: a.drv, sandbox: sb}
		if host {
			m.startBeat(h)
		}
		m.cacheHandle(h)
		return h, nil
	}
	var s *stopRetry
	if errors.As(err, &s) {
		err = s.err
	}
	if budgetOut {
		err = fmt.Errorf("%w (%s): %w", errStartupBudget, a.budget, err)
	}
	if rerr != nil {
		// The driver destroyed the sandbox best effort; without proof the
		// cleanup is left to a sweep.
		upd := cur.clone()
		upd.ProviderLeaseID = pid
		m.markPending(wctx, upd, drivers.Destroy, StatusFailed, "recording the provider lease id failed: "+rerr.Error())
		return nil, fmt.Errorf("lease %s: %w: %w", l.ID, ErrCleanupPending, err)
	}
	if pid != "" && a.reusable() && budgetOut {
		// LEASE-4: the sandbox may finish starting; keep it for resume.
		upd := cur.clone()
		upd.Status, upd.ExpiresAt = StatusRetained, now.Add(m.o.knobs.ResumableTTL)
		upd.FailureReason = fmt.Sprintf("did not start within the budget of %s; kept for a later acquisition to resume", a.budget)
		upd.ClaimedBy, upd.ClaimedUntil = "", time.Time{}
		if uerr := m.store.UpdateLease(wctx, upd); uerr != nil {
			m.o.logger.Warn("lease: recording a retained slow start", "lease", l.ID, "err", uerr)
		}
		return nil, fmt.Errorf("lease %s: sandbox %s is retained for reuse: %w", l.ID, pid, err)
	}
	return nil, m.failStart(wctx, a, cur, pid, nil, err)
}

// discardAllocated destroys the sandbox a failed attempt allocated and
// clears it from the record. It reports whether that is proven.
func (m *Manager) discardAllocated(ctx context.Context, a *acq, st *creation) bool {
	cur, pid, _ := st.snapshot()
	rc, err := m.terminate(ctx, a.drv, cur, nil, drivers.Destroy, false)
	if err != nil || !rc.Proves(pid, drivers.Destroy) {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	upd := st.cur.clone()
	upd.ProviderLeaseID = ""
	if err := m.store.UpdateLease(ctx, upd); err != nil {
		return false
	}
	st.cur, st.pid = upd, ""
	return true
}

// failStart ends a failed acquisition of the starting lease cur: failed when
// nothing was allocated, else destroyed (failed) or pending_cleanup.
func (m *Manager) failStart(ctx context.Context, a *acq, cur *Lease, pid string, sb drivers.Sandbox, cause error) error {
	upd := cur.clone()
	upd.ProviderLeaseID = pid
	if pid == "" {
		now := m.now()
		upd.Status, upd.Cleanup, upd.ReleasedAt = StatusFailed, cleanupConfirmed, now
		upd.CleanupEvidence = "no sandbox was allocated"
		upd.FailureReason = cause.Error()
		upd.ReuseKey, upd.RunKey, upd.ClaimedBy, upd.ClaimedUntil = "", "", "", time.Time{}
		if err := m.store.UpdateLease(ctx, upd); err != nil {
			m.o.logger.Warn("lease: recording a failed start", "lease", cur.ID, "err", err)
		}
		return fmt.Errorf("lease %s: acquire environment %s: %w", cur.ID, cur.Environment, cause)
	}
	pending, ok := m.markPending(ctx, upd, drivers.Destroy, StatusFailed, cause.Error())
	if !ok {
		// The record still says starting with the provider id; a sweep
		// resolves it once its claim expires. Try to remove the sandbox now.
		if _, err := m.terminate(ctx, a.drv, upd, sb, drivers.Destroy, sb != nil); err != nil {
			m.o.logger.Info("lease: removing the sandbox of a failed start", "lease", cur.ID, "err", err)
		}
		return fmt.Errorf("lease %s: acquire environment %s: %w; cleanup of sandbox %s is left to a sweep: %w", cur.ID, cur.Environment, ErrCleanupPending, pid, cause)
	}
	if sb != nil {
		m.cacheHandle(&Handle{m: m, lease: pending, driver: a.drv, sandbox: sb})
	}
	if _, err := m.cleanup(ctx, pending); err != nil {
		return fmt.Errorf("lease %s: acquire environment %s: %w: %w", cur.ID, cur.Environment, cause, err)
	}
	return fmt.Errorf("lease %s: acquire environment %s (sandbox %s destroyed): %w", cur.ID, cur.Environment, pid, cause)
}
