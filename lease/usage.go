package lease

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/environment"
)

var _ environment.UsageReporter = (*Manager)(nil)

// Usage counts the leases of one environment, for the catalog's blast
// radius before a delete (CFG-7).
type Usage struct {
	// Active counts starting and active leases.
	Active int `json:"active"`
	// Reusable counts leases that hold a sandbox later acquisitions may
	// resume (any status).
	Reusable int `json:"reusable"`
	// PendingCleanup counts leases whose cleanup is not proven yet.
	PendingCleanup int `json:"pendingCleanup"`
}

// Usage returns the lease counts of environment envID. It reads the store
// only; no provider is called.
func (m *Manager) Usage(ctx context.Context, envID string) (Usage, error) {
	eu, err := m.EnvironmentUsage(ctx, envID)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Active: len(eu.ActiveLeases), Reusable: len(eu.ReusableLeases), PendingCleanup: len(eu.PendingCleanupLeases)}, nil
}

// EnvironmentUsage implements environment.UsageReporter, so that a host
// passes the Manager in the catalog's Options.UsageReporters (CFG-7): it
// lists the active (and starting), reusable and pending-cleanup leases of
// envID, one Reference of kind "lease" each. A lease may be both active and
// reusable. It reads the store only, and the live leases only (Filter.Live),
// not the environment's history; no provider is called (CAP-1).
func (m *Manager) EnvironmentUsage(ctx context.Context, envID string) (environment.Usage, error) {
	ls, err := m.store.ListLeases(ctx, Filter{Environment: envID, Live: true})
	if err != nil {
		return environment.Usage{}, fmt.Errorf("lease: usage of environment %s: %w", envID, err)
	}
	var u environment.Usage
	for _, l := range ls {
		ref := environment.Reference{Kind: "lease", ID: l.ID, Company: l.Company,
			Detail: fmt.Sprintf("%s lease, %s, run %s", l.Policy, l.Status, l.Run)}
		switch l.Status {
		case StatusStarting, StatusActive:
			u.ActiveLeases = append(u.ActiveLeases, ref)
		case StatusPendingCleanup:
			u.PendingCleanupLeases = append(u.PendingCleanupLeases, ref)
		}
		if l.ReuseKey != "" {
			u.ReusableLeases = append(u.ReusableLeases, ref)
		}
	}
	return u, nil
}
