// Package workspacehook builds the workspace Manager that berth.New hands
// out as System.Workspaces, and carries the calls only berth.New makes of
// it (CONVENTIONS 24): the lease release that ends a lease's workspace
// records, and the workspaces' part of System.Sweep. Package workspace
// sets every variable in its init.
package workspacehook

import (
	"context"
	"log/slog"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
)

// Sources are what a workspace Manager reads and acts through.
type Sources struct {
	// Store keeps the workspace records: a workspace.Store. Required.
	Store any
	// Leases is the lease store, read to tell whether a record's lease
	// still lives: a lease.Store. Required.
	Leases any
	// Drivers resolves a lease's driver (its kind: a host target keeps a
	// workspace's directory after the lease).
	Drivers *drivers.Registry
	// Authorizer decides every action (the System's); nil:
	// authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Logger receives failures of best-effort steps; nil: discard.
	Logger *slog.Logger
}

var (
	// New returns a *workspace.Manager over src.
	New func(src Sources) any
	// LeaseEnded ends the live workspace records of the lease l (a
	// *lease.Lease, as its release stored it) with a receipt, unless the
	// lease still holds its sandbox for a reuse. The lease manager calls
	// it after a release; it answers for no principal.
	LeaseEnded func(mgr any, ctx context.Context, l any)
	// Sweep ends the workspace records whose lease no longer lives (a
	// crash during a prepare, a lease expired by a sweep) and returns how
	// many it ended. p needs authz.ActionSweep.
	Sweep func(mgr any, ctx context.Context, p authz.Principal) (int, error)
)
