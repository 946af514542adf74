package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/retry"
	"github.com/berthdev/berth/internal/secretcfg"
)

// preparedForOtherRunner reports whether the acquisition needs a runner
// that l's sandbox was not prepared for at creation: a driver of sandboxes
// (KindSandbox: Docker mounts the binary when it creates the container)
// whose recorded Lease.Runner is another binary, or none. A host lease
// installs the binary when it attaches, so any binary fits it.
func preparedForOtherRunner(a *acq, l *Lease) bool {
	if a.runner == nil || a.drv.Capabilities().Kind == drivers.KindHost {
		return false
	}
	return l.Runner == nil || l.Runner.SHA256 != a.runner.SHA256
}

// runnerSum is the short sum of r, or "none".
func runnerSum(r *drivers.RunnerSpec) string {
	if r == nil || len(r.SHA256) < 12 {
		return "none"
	}
	return r.SHA256[:12]
}

// resume resumes the recorded sandbox of a reusable lease (LEASE-4, 5).
func (m *Manager) resume(ctx context.Context, a *acq, l *Lease) (*Handle, bool, error) {
	now := m.now()
	switch {
	case l.Fingerprint != a.fp && l.Status == StatusActive && (l.ExpiresAt.IsZero() || l.ExpiresAt.After(now)):
		// Never pull a sandbox from under a run that uses it.
		return nil, false, fmt.Errorf("lease %s is in use by run %s with an earlier configuration of environment %s; it is replaced once released or expired: %w",
			l.ID, l.Run, l.Environment, errcode.ErrConflict)
	case l.Fingerprint != a.fp && l.Labels[labelTemplate] != a.templateID():
		return m.replace(ctx, a, l, replaceTemplateChanged, "")
	case l.Fingerprint != a.fp:
		return m.replace(ctx, a, l, replaceIdentityMismatch, "")
	case preparedForOtherRunner(a, l) && l.Status == StatusActive && (l.ExpiresAt.IsZero() || l.ExpiresAt.After(now)):
		return nil, false, fmt.Errorf("lease %s is in use by run %s with another runner binary (sha256 %s); it is replaced once released or expired: %w",
			l.ID, l.Run, runnerSum(l.Runner), errcode.ErrConflict)
	case preparedForOtherRunner(a, l):
		return m.replace(ctx, a, l, replaceRunnerMismatch, "")
	case l.Status != StatusStarting && !l.ExpiresAt.IsZero() && !l.ExpiresAt.After(now):
		return m.replace(ctx, a, l, replaceExpired, "")
	}
	owner := m.opOwner()
	cl, err := m.store.ClaimLease(ctx, l.ID, owner, now, now.Add(a.budget+m.o.ClaimGrace))
	if errors.Is(err, ErrClaimed) {
		if cl == nil {
			cl = l
		}
		if werr := m.waitChange(ctx, cl); werr != nil {
			return nil, false, werr
		}
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("lease %s: claiming it for resume: %w", l.ID, err)
	}
	resumer, err := drivers.DriverAs[drivers.Resumer](a.drv)
	if err != nil {
		m.unclaim(ctx, cl, "")
		return nil, false, fmt.Errorf("lease %s: %w", l.ID, err)
	}
	pid := cl.ProviderLeaseID
	if m.o.secretKeeper != nil && len(secretcfg.SecretRefs(a.snapshot)) > 0 {
		// The resumed lease will record the environment's current config:
		// hold its secrets first, and check that none was retired since
		// they were resolved (CFG-7, LEASE-9).
		err := m.useSecrets(ctx, cl.ID, &Lease{Config: a.snapshot})
		if err == nil {
			_, err = m.resolveConfig(ctx, a.drv, a.snapshot)
		}
		if err != nil {
			m.unclaim(ctx, cl, "")
			return nil, false, fmt.Errorf("lease %s preserved: the secrets of environment %s: %w: %w", l.ID, l.Environment, errPreserved, err)
		}
	}
	bctx, cancel := retry.WithTimeout(ctx, m.o.clock, a.budget)
	var sb drivers.Sandbox
	err = retry.Do(bctx, m.retryPolicy(), func(ctx context.Context, _ int) error {
		s, err := resumer.Resume(ctx, a.cfg, pid)
		sb = s
		return err
	})
	budgetOut := errors.Is(bctx.Err(), context.DeadlineExceeded)
	cancel()
	if err == nil {
		now = m.now()
		upd := cl.clone()
		upd.Status, upd.Run, upd.Workspace = StatusActive, a.req.Run, a.req.Workspace
		upd.LastUsedAt, upd.ExpiresAt, upd.ReleasedAt = now, m.expiry(a, now), time.Time{}
		upd.Uses++
		upd.FailureReason, upd.Cleanup, upd.CleanupEvidence, upd.CleanupEvidenceKind = "", cleanupNone, "", drivers.EvidenceNone
		upd.Config = a.snapshot.Clone()
		if a.runner != nil {
			upd.Runner = cloneRunner(a.runner)
		}
		upd.ClaimedBy, upd.ClaimedUntil = "", time.Time{}
		if err := m.store.UpdateLease(context.WithoutCancel(ctx), upd); err != nil {
			// The record still owns the sandbox (provider id, reuse key).
			return nil, false, fmt.Errorf("lease %s: resumed sandbox %s but could not record it; the lease is kept for reuse: %w", l.ID, pid, err)
		}
		h := &Handle{m: m, lease: upd, driver: a.drv, sandbox: sb, resumed: true}
		m.cacheHandle(h)
		return h, false, nil
	}
	if sandboxGone(err) {
		return m.replace(ctx, a, cl, replaceNotFound, owner)
	}
	m.unclaim(ctx, cl, "resume failed: "+err.Error())
	if budgetOut {
		err = fmt.Errorf("%w: %w", errStartupBudget, err)
	}
	return nil, false, fmt.Errorf("lease %s preserved: resuming sandbox %s of environment %s failed and no replacement was created: %w: %w",
		l.ID, pid, l.Environment, errPreserved, err)
}

// sandboxGone reports whether a driver's err says the sandbox itself is
// gone: a not-found that is not the image's (drivers.ErrImageNotFound is
// a not-found too, and leaves the sandbox's fate unknown).
func sandboxGone(err error) bool {
	return errors.Is(err, errcode.ErrNotFound) && !errors.Is(err, drivers.ErrImageNotFound)
}
