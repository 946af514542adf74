package lease

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
)

// leaseUsage is the Manager's hook for the catalog's blast radius, returned
// by newManager (leasehook.New): an unexported type, so that only the composer
// who built the Manager can ask it.
type leaseUsage struct{ m *Manager }

var (
	_ envhook.UsageReporter[environment.Usage] = leaseUsage{}
	_ envhook.ReferenceClearer                 = leaseUsage{}
)

// EnvironmentUsage implements envhook.UsageReporter.
func (u leaseUsage) EnvironmentUsage(ctx context.Context, envID string) (environment.Usage, error) {
	ls, err := u.m.store.ListLeases(ctx, Filter{Environment: envID, Live: true})
	if err != nil {
		return environment.Usage{}, fmt.Errorf("lease: usage of environment %s: %w", envID, err)
	}
	var eu environment.Usage
	for _, l := range ls {
		ref := environment.Reference{Kind: "lease", ID: l.ID, Company: l.Company,
			Detail: fmt.Sprintf("%s lease, %s, run %s", l.Policy, l.Status, l.Run)}
		if isMember(l) { // pooled, or a refill starting one
			ref.Detail = fmt.Sprintf("warm-pool member, %s", l.Status)
			eu.PooledLeases = append(eu.PooledLeases, ref)
			continue
		}
		switch l.Status {
		case StatusStarting, StatusActive:
			eu.ActiveLeases = append(eu.ActiveLeases, ref)
		case StatusPendingCleanup:
			eu.PendingCleanupLeases = append(eu.PendingCleanupLeases, ref)
		}
		if l.ReuseKey != "" {
			eu.ReusableLeases = append(eu.ReusableLeases, ref)
		}
	}
	return eu, nil
}

// ClearEnvironment implements envhook.ReferenceClearer: after the
// catalog deleted environment envID it drains the environment's warm pool,
// destroying each member with a receipt (CFG-7). A member whose destroy
// is not proven stays pending_cleanup for the next Sweep.
func (u leaseUsage) ClearEnvironment(ctx context.Context, envID string) error {
	var rep PoolReport
	if err := u.m.drain(ctx, envID, "its environment was deleted", &rep); err != nil {
		return err
	}
	if rep.RetirePending > 0 {
		return fmt.Errorf("lease: draining the pool of environment %s: %d member(s) pending cleanup (a sweep retries them): %w", envID, rep.RetirePending, ErrCleanupPending)
	}
	return nil
}

// EnvironmentArchived is envhook.UsageReporter's archive hook: after the
// catalog archived environment envID it drains the environment's warm
// pool as ClearEnvironment does (an archived environment is never leased).
func (u leaseUsage) EnvironmentArchived(ctx context.Context, envID string) error {
	var rep PoolReport
	if err := u.m.drain(ctx, envID, "its environment was archived", &rep); err != nil {
		return err
	}
	if rep.RetirePending > 0 {
		return fmt.Errorf("lease: draining the pool of environment %s: %d member(s) pending cleanup (a sweep retries them): %w", envID, rep.RetirePending, ErrCleanupPending)
	}
	return nil
}

// EnvironmentSaved is envhook.UsageReporter's save hook: after the
// catalog saved env with a warm pool (created, its pool or config changed,
// restored) it starts filling the pool in the background, as an adoption
// or a sweep does (refillSoon: one fill per environment at a time, each
// start within its budget; nothing with Options.ManualPoolRefill, and no
// member while the instance settings disable environments). It returns at
// once.
func (u leaseUsage) EnvironmentSaved(_ context.Context, env *environment.Environment) {
	u.m.refillSoon(env)
}
