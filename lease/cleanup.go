package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/retry"
)

// terminate stops or destroys the sandbox of l and returns the provider's
// receipt. With preferHandle it uses the live handle sb when there is one;
// otherwise it prefers drivers.Destroyer by provider lease id (which proves
// a stop too). A host lease without a live handle is never confirmed by
// assertion: while its holder's claim lasts the error names the holder,
// after it the lease ends only by a check on the host (holder.go).
func (m *Manager) terminate(ctx context.Context, drv drivers.Driver, l *Lease, sb drivers.Sandbox, d drivers.Disposition, preferHandle bool) (drivers.Receipt, error) {
	cctx := m.withBudget(ctx, m.now().Add(m.o.knobs.CleanupBudget))
	defer cctx.cancel()
	if sb != nil && preferHandle {
		return sb.Release(cctx, d)
	}
	host := drv.Capabilities().Kind == drivers.KindHost
	if destroyer, err := drivers.DriverAs[drivers.Destroyer](drv); err == nil && !host && l.ProviderLeaseID != "" {
		cfg, err := m.resolveConfig(cctx, drv, l.Config)
		if err != nil {
			return drivers.Receipt{}, err
		}
		return destroyer.Destroy(cctx, cfg, l.ProviderLeaseID)
	}
	if sb != nil {
		return sb.Release(cctx, d)
	}
	if host {
		// The holder's live session ends a host lease; while its claim
		// lasts nobody else does, and after it a check on the host must.
		if l.Holder != "" && l.HolderUntil.After(m.now()) {
			return drivers.Receipt{}, m.hostUnchecked(l)
		}
		return m.checkHost(cctx, drv, l)
	}
	if l.ProviderLeaseID == "" {
		return drivers.Receipt{}, fmt.Errorf("lease %s: no provider lease id recorded", l.ID)
	}
	return drivers.Receipt{}, fmt.Errorf("lease %s: no live handle for sandbox %s and driver %q cannot destroy by id: %w",
		l.ID, l.ProviderLeaseID, drv.Name(), drivers.ErrUnsupported)
}

// markPending records upd as pending cleanup (owing d, then status after)
// and returns the stored lease. ok is false when the store refused it.
func (m *Manager) markPending(ctx context.Context, upd *Lease, d drivers.Disposition, after Status, reason string) (*Lease, bool) {
	upd.Status, upd.Cleanup, upd.CleanupDisposition, upd.AfterCleanup = StatusPendingCleanup, cleanupPending, d, after
	upd.FailureReason = reason
	upd.ReuseKey, upd.RunKey, upd.ClaimedBy, upd.ClaimedUntil = "", "", "", time.Time{}
	if err := m.store.UpdateLease(ctx, upd); err != nil {
		m.o.logger.Warn("lease: recording a pending cleanup", "lease", upd.ID, "err", err)
		return nil, false
	}
	return upd, true
}

// cleanup performs the pending cleanup of l (status pending_cleanup, as
// stored, claimed by the caller or unclaimed) with the config recorded on
// the lease (LEASE-9). It returns the updated lease; the error wraps
// ErrCleanupPending when the provider did not prove the cleanup.
func (m *Manager) cleanup(ctx context.Context, l *Lease) (*Lease, error) {
	var proven bool
	var evidence string
	var kind drivers.EvidenceKind
	var cerr error
	drv, err := m.reg.Lookup(l.Provider)
	switch {
	case err != nil:
		cerr = err
	case l.ProviderLeaseID == "" && m.liveHandle(l.ID) == nil:
		proven, evidence, kind, cerr = m.cleanupByLabel(ctx, drv, l)
	default:
		var sb drivers.Sandbox
		if h := m.liveHandle(l.ID); h != nil {
			sb = h.sandbox
		}
		// The runner's tasks first (PRP-6). If the runner still cannot
		// prove their stop, the sandbox's own proof stands in: a confirmed
		// stop or destroy of a sandbox leaves no process, and a host
		// lease's release kills and checks the processes tagged with the
		// lease (the runner and its tasks carry the tag).
		runnerEv, runners, serr := m.stopTasks(ctx, l)
		if serr != nil {
			runnerEv = serr.Error() + "; the sandbox's own proof instead"
		}
		var kerr error
		var hostKind drivers.EvidenceKind
		if runnerEv, hostKind, kerr = m.endRunners(ctx, drv, sb, l, runners, runnerEv); kerr != nil {
			serr = errors.Join(serr, kerr)
		}
		rc, err := m.terminate(ctx, drv, l, sb, l.CleanupDisposition, false)
		proven, evidence, kind, cerr = proof(rc, err, l.ProviderLeaseID, l.CleanupDisposition)
		kind = strongerEvidence(kind, hostKind)
		if proven && kerr != nil {
			// A host lease whose runner survived the tag check is not clean.
			proven, cerr = false, kerr
		}
		if proven {
			evidence = withCaveat(withRunner(runnerEv, evidence), kind)
		} else if serr != nil {
			cerr = fmt.Errorf("%w; %w", serr, cerr)
		}
	}
	upd := l.clone()
	upd.CleanupAttempts++
	upd.ClaimedBy, upd.ClaimedUntil = "", time.Time{}
	if proven {
		upd.Status = l.AfterCleanup
		if upd.Status == "" {
			upd.Status = StatusReleased
		}
		upd.Cleanup, upd.CleanupEvidence, upd.CleanupEvidenceKind, upd.ReleasedAt = cleanupConfirmed, evidence, kind, m.now()
	} else {
		upd.CleanupEvidence = cerr.Error()
	}
	if err := m.store.UpdateLease(context.WithoutCancel(ctx), upd); err != nil {
		return l, fmt.Errorf("lease %s: recording cleanup: %w: %w", l.ID, ErrCleanupPending, err)
	}
	if proven {
		m.dropHandle(l.ID)
		return upd, nil
	}
	return upd, fmt.Errorf("lease %s: %w: %w", l.ID, ErrCleanupPending, cerr)
}

// proof turns a receipt into a verdict (LEASE-7): only a confirmed receipt
// for the same provider lease id in the asked-for state, standing on
// evidence that may end a lease (evidenceEnds: never the
// runner's attestation), proves anything. It returns the evidence and its
// kind (a confirmed receipt that names none is the provider's).
func proof(rc drivers.Receipt, err error, pid string, d drivers.Disposition) (bool, string, drivers.EvidenceKind, error) {
	if err != nil {
		return false, "", drivers.EvidenceNone, fmt.Errorf("%s of sandbox %s failed: %w", d, pid, err)
	}
	kind := rc.EvidenceKind
	if kind == drivers.EvidenceNone {
		kind = drivers.EvidenceProvider
	}
	if !rc.Proves(pid, d) || !evidenceEnds(kind) {
		return false, "", drivers.EvidenceNone, fmt.Errorf("%s of sandbox %s not confirmed by the provider or a check of berth's own (receipt: id %q, state %q, confirmed %t, evidence %s %q)",
			d, pid, rc.ProviderLeaseID, rc.State, rc.Confirmed, rc.EvidenceKind, rc.Evidence)
	}
	ev := rc.Evidence
	if ev == "" {
		ev = fmt.Sprintf("provider confirmed %s", rc.State)
	}
	return true, ev, kind, nil
}

// cleanupByLabel cleans up a lease whose provider lease id was never
// recorded: it destroys every sandbox labelled for the lease.
func (m *Manager) cleanupByLabel(ctx context.Context, drv drivers.Driver, l *Lease) (bool, string, drivers.EvidenceKind, error) {
	if drv.Capabilities().Kind == drivers.KindHost {
		// Its acquisition never recorded the session (it never became
		// active), so no handle ever ran a command in it; the session's
		// connection ended with the acquiring process.
		return true, "host session never became active: no command of the lease was ever started", drivers.EvidenceNone, nil
	}
	lister, err := drivers.DriverAs[drivers.Lister](drv)
	if err != nil {
		return false, "", drivers.EvidenceNone, fmt.Errorf("no provider lease id recorded and the driver cannot list sandboxes by label; an operator must check: %w", err)
	}
	destroyer, err := drivers.DriverAs[drivers.Destroyer](drv)
	if err != nil {
		return false, "", drivers.EvidenceNone, fmt.Errorf("no provider lease id recorded and the driver cannot destroy by id: %w", err)
	}
	cctx, cancel := retry.WithTimeout(ctx, m.o.clock, m.o.knobs.CleanupBudget)
	defer cancel()
	cfg, err := m.resolveConfig(cctx, drv, l.Config)
	if err != nil {
		return false, "", drivers.EvidenceNone, err
	}
	inst := l.Labels[labelInstance]
	if inst == "" {
		inst = m.o.InstanceID
	}
	found, err := lister.List(cctx, cfg, map[string]string{labelInstance: inst, labelLease: l.ID})
	if err != nil {
		return false, "", drivers.EvidenceNone, fmt.Errorf("listing sandboxes labelled for the lease: %w", err)
	}
	var errs []error
	for _, sb := range found {
		rc, err := destroyer.Destroy(cctx, cfg, sb.ProviderLeaseID)
		if ok, _, _, perr := proof(rc, err, sb.ProviderLeaseID, drivers.Destroy); !ok {
			errs = append(errs, perr)
		}
	}
	if len(errs) > 0 {
		return false, "", drivers.EvidenceNone, errors.Join(errs...)
	}
	return true, fmt.Sprintf("no provider lease id recorded; %d sandbox(es) labelled for the lease destroyed", len(found)), drivers.EvidenceProvider, nil
}
