package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/retry"
)

// SweepReport counts what one Sweep did.
type SweepReport struct {
	// Claimed counts the leases this sweep claimed.
	Claimed int `json:"claimed"`
	// Interrupted counts starting leases whose acquirer vanished.
	Interrupted int `json:"interrupted"`
	// Expired counts leases past their expiry whose sandbox was destroyed.
	Expired int `json:"expired"`
	// CleanedUp counts pending cleanups that are now proven.
	CleanedUp int `json:"cleanedUp"`
	// StillPending counts cleanups that are still not proven.
	StillPending int `json:"stillPending"`
	// OrphansDestroyed counts sandboxes labelled by this instance that no
	// lease owned, destroyed with proof; OrphansFailed those not proven.
	OrphansDestroyed int `json:"orphansDestroyed"`
	OrphansFailed    int `json:"orphansFailed"`
	// EnvironmentsSkipped counts environments whose driver cannot list
	// sandboxes (no orphan search possible) or could not be listed.
	EnvironmentsSkipped int `json:"environmentsSkipped"`
	// Pruned counts records of ended leases removed after
	// Options.PruneAfter: at most 50 batches of the sweep's limit (5,000
	// by default) per sweep.
	Pruned int `json:"pruned"`
	// Pools counts the warm-pool members retired (refills run in the
	// background after the sweep).
	Pools PoolReport `json:"pools"`
}

// Sweep expires leases past their expiry (destroying their sandboxes),
// resolves acquisitions whose acquirer vanished, retries pending cleanups
// with the config recorded on each lease, and destroys orphans: sandboxes
// that carry this instance's labels but that no lease owns (LEASE-9). Each
// lease is claimed in the store first, so that sweeps of several replicas
// never process one cleanup twice (LEASE-10). Failures to clean up are
// counted in the report, not returned; the error reports a store failure or
// a failed orphan listing (joined).
//
// A sweep is an operator action: p must be allowed authz.ActionSweep
// (instance admins and local operators under DefaultPolicy), else the error
// wraps errcode.ErrDenied and nothing is done.
func (m *Manager) Sweep(ctx context.Context, p authz.Principal) (SweepReport, error) {
	var rep SweepReport
	if err := m.authorize(ctx, p, authz.ActionSweep, authz.Resource{Kind: authz.ResourceKindLease}); err != nil {
		return rep, fmt.Errorf("lease: sweep: %w", err)
	}
	now := m.now()
	owner := m.opOwner()
	claimed, err := m.store.ClaimForSweep(ctx, owner, now, now.Add(m.o.knobs.CleanupBudget), m.o.knobs.SweepLimit)
	if err != nil {
		return rep, fmt.Errorf("lease: sweep: %w", err)
	}
	rep.Claimed = len(claimed)
	for _, l := range claimed {
		// Renew the claim right before the work, so that a long batch never
		// works on a lease whose claim expired and was taken by another
		// replica (LEASE-10).
		t := m.now()
		renewed, err := m.store.ClaimLease(ctx, l.ID, owner, t, t.Add(m.o.knobs.CleanupBudget))
		if err != nil || renewed.Version != l.Version+1 {
			if err == nil {
				m.unclaim(ctx, renewed, "")
			}
			continue
		}
		m.sweepOne(ctx, renewed, t, &rep)
	}
	err = errors.Join(m.sweepPools(ctx, &rep), m.sweepOrphans(ctx, &rep))
	if m.o.PruneAfter > 0 {
		n, perr := m.prune(ctx)
		rep.Pruned = n
		if perr != nil {
			err = errors.Join(err, fmt.Errorf("lease: sweep: pruning ended leases: %w", perr))
		}
	}
	return rep, err
}

// pruneBatches bounds the prune batches (of the sweep limit each) of one
// Sweep: 5,000 records at the default limit, so that pruning keeps up
// with hosts that end thousands of leases between sweeps and catches up
// on a backlog (a million records past a new retention) within a few
// hundred sweeps, while each batch is a short statement of its own.
const pruneBatches = 50

// prune removes the records of ended leases past the retention, in
// batches of the sweep limit, until a batch finds fewer than that or
// pruneBatches were removed; it returns how many it removed.
func (m *Manager) prune(ctx context.Context) (int, error) {
	before := m.now().Add(-m.o.PruneAfter)
	total := 0
	for range pruneBatches {
		n, err := m.store.PruneLeases(ctx, before, m.o.knobs.SweepLimit)
		total += n
		if err != nil || n < m.o.knobs.SweepLimit {
			return total, err
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
	return total, nil
}

func (m *Manager) sweepOne(ctx context.Context, l *Lease, now time.Time, rep *SweepReport) {
	switch l.Status {
	case StatusStarting:
		rep.Interrupted++
		pending, ok := m.markPending(ctx, l.clone(), drivers.Destroy, StatusFailed,
			"acquisition interrupted before it finished (its claim expired)")
		if !ok {
			return
		}
		l = pending
	case StatusActive, StatusRetained, StatusReleased:
		pending, ok := m.markPending(ctx, l.clone(), drivers.Destroy, StatusExpired,
			fmt.Sprintf("expired at %s", l.ExpiresAt.Format(time.RFC3339)))
		if !ok {
			return
		}
		l = pending
	case StatusPendingCleanup:
	default:
		m.unclaim(ctx, l, "")
		return
	}
	done, err := m.cleanup(ctx, l)
	switch {
	case err != nil:
		rep.StillPending++
	case done.Status == StatusExpired:
		rep.Expired++
	default:
		rep.CleanedUp++
	}
}

// sweepOrphans lists, per environment, the sandboxes labelled by this
// instance and destroys those no lease owns.
func (m *Manager) sweepOrphans(ctx context.Context, rep *SweepReport) error {
	envs, err := m.sweepTargets(ctx)
	if err != nil {
		return fmt.Errorf("lease: sweep: listing environments: %w", err)
	}
	var errs []error
	for _, env := range envs {
		drv, err := m.reg.Lookup(env.Driver)
		if err != nil {
			rep.EnvironmentsSkipped++
			continue
		}
		lister, lerr := drivers.DriverAs[drivers.Lister](drv)
		destroyer, derr := drivers.DriverAs[drivers.Destroyer](drv)
		if lerr != nil || derr != nil {
			rep.EnvironmentsSkipped++
			continue
		}
		cctx, cancel := retry.WithTimeout(ctx, m.o.clock, m.o.knobs.CleanupBudget)
		cfg, err := m.resolveConfig(cctx, drv, env.Config)
		var found []drivers.SandboxInfo
		listedAt := m.now()
		if err == nil {
			found, err = lister.List(cctx, cfg, map[string]string{labelInstance: m.o.InstanceID, labelEnvironment: env.ID})
		}
		if err != nil {
			cancel()
			rep.EnvironmentsSkipped++
			errs = append(errs, fmt.Errorf("environment %s: listing sandboxes: %w", env.ID, err))
			continue
		}
		live := m.liveOwners(cctx, env.ID, found)
		for _, info := range found {
			if live.owns(info, m.now()) || m.owned(cctx, info, listedAt) {
				continue
			}
			rc, err := destroyer.Destroy(cctx, cfg, info.ProviderLeaseID)
			if ok, _, _, perr := proof(rc, err, info.ProviderLeaseID, drivers.Destroy); ok {
				rep.OrphansDestroyed++
				m.o.logger.Info("lease: destroyed an orphan sandbox", "environment", env.ID, "sandbox", info.ProviderLeaseID, "lease", info.Labels[labelLease])
			} else {
				rep.OrphansFailed++
				m.o.logger.Warn("lease: orphan sandbox not destroyed", "environment", env.ID, "sandbox", info.ProviderLeaseID, "err", perr)
			}
		}
		cancel()
	}
	return errors.Join(errs...)
}

// owned reports whether a lease record owns the listed sandbox: its lease
// (by label) records it and still holds a sandbox, or is starting under a
// live claim and has not recorded its provider lease id yet, or is pending
// cleanup (the cleanup phase owns those). On a store error it answers true:
// a sandbox is never destroyed on a guess.
func (m *Manager) owned(ctx context.Context, info drivers.SandboxInfo, listedAt time.Time) bool {
	id := info.Labels[labelLease]
	if id != "" {
		l, err := m.store.GetLease(ctx, id)
		switch {
		case errors.Is(err, errcode.ErrNotFound):
		case err != nil:
			return true
		case ownedByLabel(l, info, m.now()):
			return true
		case l.ProviderLeaseID == info.ProviderLeaseID && l.Cleanup == cleanupConfirmed && !l.ReleasedAt.Before(listedAt):
			// Its cleanup was proven after the listing: the listing is stale.
			return true
		}
	}
	// A record may point at the sandbox without the label matching.
	ls, err := m.store.ListLeases(ctx, Filter{ProviderLeaseID: info.ProviderLeaseID})
	if err != nil {
		return true
	}
	for _, l := range ls {
		if ownedByRecord(l, info) {
			return true
		}
	}
	return false
}

// ownedByLabel reports whether l, the lease named by the sandbox's lease
// label, owns the listed sandbox at now.
func ownedByLabel(l *Lease, info drivers.SandboxInfo, now time.Time) bool {
	switch {
	case l.Status == StatusPendingCleanup && (l.ProviderLeaseID == info.ProviderLeaseID || l.ProviderLeaseID == ""):
		return true
	case l.ProviderLeaseID == info.ProviderLeaseID && l.holdsSandbox():
		return true
	case l.Status == StatusStarting && l.ProviderLeaseID == "" && l.ClaimedUntil.After(now):
		return true
	}
	return false
}

// ownedByRecord reports whether l, a lease that records the listed
// sandbox's provider id, owns it.
func ownedByRecord(l *Lease, info drivers.SandboxInfo) bool {
	return l.ProviderLeaseID == info.ProviderLeaseID && (l.holdsSandbox() || l.Status == StatusPendingCleanup)
}

// liveLeases indexes the live leases of one environment, read after its
// sandboxes were listed, by id and by provider lease id.
type liveLeases struct {
	byID, byProvider map[string]*Lease
}

// liveOwners reads the live leases of environment env once, so that the
// sandboxes they own (nearly all that a listing finds) cost no read each.
// It reads nothing when nothing was found, and answers an empty index on
// a store error: owned then decides each sandbox alone.
func (m *Manager) liveOwners(ctx context.Context, env string, found []drivers.SandboxInfo) liveLeases {
	if len(found) == 0 {
		return liveLeases{}
	}
	ls, err := m.store.ListLeases(ctx, Filter{Environment: env, Live: true})
	if err != nil {
		return liveLeases{}
	}
	ix := liveLeases{byID: make(map[string]*Lease, len(ls)), byProvider: make(map[string]*Lease, len(ls))}
	for _, l := range ls {
		ix.byID[l.ID] = l
		if l.ProviderLeaseID != "" {
			ix.byProvider[l.ProviderLeaseID] = l
		}
	}
	return ix
}

// owns reports whether a live lease of the index owns the listed sandbox,
// by the rules of owned. Only a yes is final (a sandbox a live record
// holds is no orphan); a no leaves the sandbox to owned, which reads its
// records one by one (a lease that ended since the listing, for one, is
// not in the index).
func (ix liveLeases) owns(info drivers.SandboxInfo, now time.Time) bool {
	if l, ok := ix.byID[info.Labels[labelLease]]; ok && ownedByLabel(l, info, now) {
		return true
	}
	l, ok := ix.byProvider[info.ProviderLeaseID]
	return ok && ownedByRecord(l, info)
}

// sweepTargets returns the environments to search for orphans.
func (m *Manager) sweepTargets(ctx context.Context) ([]*environment.Environment, error) {
	if m.o.sweepEnvironments != nil {
		return m.o.sweepEnvironments(ctx)
	}
	ls, err := m.store.ListLeases(ctx, Filter{})
	if err != nil {
		return nil, err
	}
	newest := map[string]*Lease{}
	var order []string
	for _, l := range ls { // ordered by AcquiredAt: later ones win
		if _, seen := newest[l.Environment]; !seen {
			order = append(order, l.Environment)
		}
		newest[l.Environment] = l
	}
	out := make([]*environment.Environment, 0, len(order))
	for _, id := range order {
		l := newest[id]
		out = append(out, &environment.Environment{ID: id, Driver: l.Provider, Status: environment.StatusActive, Config: l.Config})
	}
	return out, nil
}
