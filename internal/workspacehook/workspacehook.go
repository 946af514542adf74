// Package workspacehook builds the workspace Manager that berth.New hands
// out as System.Workspaces, and carries the calls only berth.New makes of
// it (CONVENTIONS 24): the lease release that ends a lease's workspace
// records, and the workspaces' part of System.Sweep. Package workspace
// sets every variable in its init.
package workspacehook

import (
	"context"
	"log/slog"
	"os"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
)

// Sources are what a workspace Manager reads and acts through.
type Sources struct {
	// Store keeps the workspace records: a workspace.Store (sealed;
	// Records inside). Required.
	Store any
	// Leases is the lease store, read to tell whether a record's lease
	// still lives: a lease.Store. Required.
	Leases any
	// LeaseManager is the System's *lease.Manager: the files of a lease
	// for a principal who may list them but not open the lease
	// (workspace.Manager.Files with no handle). Required.
	LeaseManager any
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

// Filter selects workspace records in Records.ListWorkspaces; a zero field
// matches any value, except that Company and Project name one owner: when
// Company is set, Project is matched exactly (an empty Project only
// matches an empty one). State is a workspace.State.
type Filter struct {
	Company string
	Project string
	Lease   string
	State   string
}

// Records is the store of workspace records behind the sealed
// workspace.Store, W being *workspace.Workspace: berth's memory store and
// store/internal/sqlstore implement it, and workspace/workspacetest is its
// suite. Its errors wrap errcode.ErrNotFound, errcode.ErrConflict or
// errcode.ErrInvalid (a record Validate refuses).
type Records[W any] interface {
	// InsertWorkspace stores w, which must be preparing at Revision 1
	// (write-ahead). errcode.ErrConflict if the id is taken or the owner's
	// key has a live (not ended) record; of concurrent inserts of one key,
	// also from several processes, one wins.
	InsertWorkspace(ctx context.Context, w W) error
	// GetWorkspace returns the record by id, or errcode.ErrNotFound.
	GetWorkspace(ctx context.Context, id string) (W, error)
	// FindWorkspace returns the live record of key within exactly this
	// company and project, or errcode.ErrNotFound: never another
	// owner's.
	FindWorkspace(ctx context.Context, company, project, key string) (W, error)
	// ListWorkspaces returns the matching records by CreatedAt, then id.
	ListWorkspaces(ctx context.Context, f Filter) ([]W, error)
	// UpdateWorkspace replaces record w.ID if its stored Revision is
	// w.Revision-1, its owner, key and creation time are unchanged, and
	// its state moves forward (preparing -> ready -> ended, preparing ->
	// ended; an ended record is final); otherwise errcode.ErrConflict
	// (errcode.ErrNotFound if absent) and nothing changes.
	UpdateWorkspace(ctx context.Context, w W) error
}

var (
	// Seal returns the Records[*workspace.Workspace] s as a
	// workspace.Store (store/internal/sqlstore's Stores().Workspaces).
	Seal func(s any) any
	// Unseal returns the Records[*workspace.Workspace] inside the
	// workspace.Store s (workspace/workspacetest, tests).
	Unseal func(s any) any
	// NewMemoryStore returns an empty in-memory workspace.Store: the
	// embedded default (store.Memory). It is safe for concurrent use;
	// each operation is atomic under one lock.
	NewMemoryStore func() any
	// Validate reports, wrapping errcode.ErrInvalid, the first way the
	// *workspace.Workspace w is not a record a store keeps.
	Validate func(w any) error
	// Follows reports, wrapping errcode.ErrConflict, why the
	// *workspace.Workspace w cannot replace prev: a revision that does
	// not follow, another owner, key or creation time, or a state that
	// does not move forward. Stores call it.
	Follows func(w, prev any) error
	// TreeHash returns the tree hash (the package doc of workspace) of
	// the files under root.
	TreeHash func(root *os.Root) (string, error)
)
