package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/berthdev/berth/authz"
)

// servicePrincipal is the server's own principal for the work it does by
// itself (the managed local environment, the maintenance timers).
var servicePrincipal = authz.Principal{ID: "server", Role: authz.RoleLocalOperator}

// maintenanceClaim is the name of the maintenance timers' row in
// server_timers.
const maintenanceClaim = "maintenance"

// claimTimer takes or renews the claim name for holder until now+ttl: it
// succeeds when no replica holds it, its claim expired, or holder holds it
// already. One statement, so that replicas racing for it get one winner.
func (h *hostDB) claimTimer(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	res, err := h.db.ExecContext(ctx, h.q(`INSERT INTO server_timers (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE server_timers.expires_at <= ? OR server_timers.holder = excluded.holder`),
		name, holder, now.Add(ttl).Unix(), now.Unix())
	if err != nil {
		return false, fmt.Errorf("server: claim the %s timer: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("server: claim the %s timer: %w", name, err)
	}
	return n == 1, nil
}

// maintenanceReport is what one maintenance round did (for the log and
// the tests).
type maintenanceReport struct {
	// Claimed is false when another replica holds the timers' claim: the
	// round then only pruned this replica's ended runs.
	Claimed    bool
	RunsPruned int
	// RunsTakenOver counts the runs whose holder's claim lapsed that this
	// replica took over (every replica looks, each round).
	RunsTakenOver      int
	TakeOverErr        error
	SweepErr           error
	PoolsErr           error
	HealthErr          error
	LeasesExpired      int
	PoolMembersCreated int
}

// maintain runs one maintenance round: it prunes the ended runs, takes
// over the runs whose holder's claim lapsed (a replica that died, or this
// one before a restart: reattached, or stopped with proof past their
// deadline) and, when it holds the timers' claim (one replica at a time, the
// claim lasting three periods so that a dead holder is replaced),
// sweeps the System (setup sessions past their TTL, leases, template
// deletions), keeps the warm pools filled and measures provider health.
func (s *server) maintain(ctx context.Context, holder string) (maintenanceReport, error) {
	rep := maintenanceReport{RunsPruned: s.runs.prune(s.now())}
	rep.RunsTakenOver, rep.TakeOverErr = s.runs.takeOver(ctx)
	ttl := 3 * max(s.limits.sweepInterval, time.Minute)
	ok, err := s.host.claimTimer(ctx, maintenanceClaim, holder, s.now(), ttl)
	if err != nil || !ok {
		return rep, err
	}
	rep.Claimed = true
	sw, err := s.sys.Sweep(ctx, servicePrincipal)
	rep.SweepErr = err
	rep.LeasesExpired = sw.Leases.Expired
	pr, err := s.sys.Leases().MaintainPools(ctx, servicePrincipal)
	rep.PoolsErr = err
	rep.PoolMembersCreated = pr.Created
	rep.HealthErr = s.sys.Catalog().RefreshAllHealth(ctx, servicePrincipal)
	return rep, nil
}

// runMaintenance runs maintain every -sweep-interval (jittered by ±10%)
// until ctx ends; each round's errors are logged.
func (s *server) runMaintenance(ctx context.Context) {
	if s.limits.sweepInterval <= 0 {
		return
	}
	holder := randomToken()[:16]
	for {
		rep, err := s.maintain(ctx, holder)
		if ctx.Err() != nil {
			return
		}
		attrs := []any{"claimed", rep.Claimed, "runs_pruned", rep.RunsPruned, "runs_taken_over", rep.RunsTakenOver, "leases_expired", rep.LeasesExpired, "pool_members_created", rep.PoolMembersCreated}
		for name, e := range map[string]error{"error": err, "sweep_error": rep.SweepErr, "pools_error": rep.PoolsErr, "health_error": rep.HealthErr, "takeover_error": rep.TakeOverErr} {
			if e != nil {
				attrs = append(attrs, name, e.Error())
			}
		}
		s.log.Info("maintenance", attrs...)
		jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(s.limits.sweepInterval))
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.limits.sweepInterval + jitter):
		}
	}
}
