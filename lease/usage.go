package lease

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/environment"
)

// leaseUsage is the Manager's hook for the catalog's blast radius, returned
// by NewManager (see there): an unexported type, so that only the composer
// who built the Manager can ask it.
type leaseUsage struct{ m *Manager }

var _ environment.UsageReporter = leaseUsage{}

// EnvironmentUsage implements environment.UsageReporter.
func (u leaseUsage) EnvironmentUsage(ctx context.Context, envID string) (environment.Usage, error) {
	ls, err := u.m.store.ListLeases(ctx, Filter{Environment: envID, Live: true})
	if err != nil {
		return environment.Usage{}, fmt.Errorf("lease: usage of environment %s: %w", envID, err)
	}
	var eu environment.Usage
	for _, l := range ls {
		ref := environment.Reference{Kind: "lease", ID: l.ID, Company: l.Company,
			Detail: fmt.Sprintf("%s lease, %s, run %s", l.Policy, l.Status, l.Run)}
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
