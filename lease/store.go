package lease

import (
	"context"
	"maps"
	"time"

	"github.com/berthdev/berth/drivers"
)

// Store persists leases. Implementations: memoryStore in this package, and
// the SQL stores, which pass the same conformance suite
// (lease/leasetest.RunStoreTests). A Store is safe for concurrent use and
// shared by every replica of a host.
//
// Copies: a Store copies the scalar fields of the leases it is given and
// returns (a caller may change them on what it holds, and the store's copy
// is not affected), but it may keep the maps (Config, Labels, Metadata)
// and the Runner of a lease it is given and hand them out again on the
// leases it returns. Those are read-only values for everyone: neither a
// Store nor a caller changes one in place once it has been handed to a
// Store or returned by one; a change assigns a new map (or runner). The
// manager keeps to that on every path, and its exported methods return
// deep copies (Manager.Get, List, Release, Handle.Lease, Handle.Release),
// so a host never holds a store's map. The conformance suite checks both
// halves (lease/leasetest: "returned leases are copies").
//
// Two kinds of atomicity carry the manager's guarantees across replicas
// (LEASE-8, LEASE-10):
//   - keys: at most one lease holds a given non-empty ReuseKey, and at most
//     one a given non-empty RunKey. InsertLease and UpdateLease refuse a key
//     another lease holds (SQL: partial unique indexes, INSERT ... ON
//     CONFLICT DO NOTHING).
//   - claims: ClaimLease and ClaimForSweep set ClaimedBy/ClaimedUntil only
//     on leases nobody else holds a live claim on (SQL: UPDATE ... WHERE
//     claimed_until <= now, or SELECT ... FOR UPDATE SKIP LOCKED).
//
// Optionally, a Store may also have the method
//
//	ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*Lease, error)
//
// which is ClaimLease that, when it claims an active or retained lease,
// also sets the lease's ExpiresAt to until in the same write (other
// statuses are claimed as ClaimLease claims them). Manager.Release writes
// ahead that a lease it stops or destroys expires when its claim does (so
// that a release whose final write fails leaves the lease to the next
// sweep); with this method that costs no write of its own, without it the
// manager claims and then updates. NewMemoryStore's store and the SQL
// stores have it, and leasetest checks it where a store has it.
type Store interface {
	// InsertLease writes l as a new lease with Version 1 (it sets
	// l.Version). If l.ID exists, or another lease holds l.ReuseKey or
	// l.RunKey, it writes nothing and returns an error wrapping
	// errcode.ErrConflict together with that other lease (nil when only
	// the id collided).
	//
	// A q that sets a limit (PerCompany or PerCompanyEnvironment above
	// zero) is checked in the same step: the store counts the live leases
	// (Filter.Live) of l.Company, and those on l.Environment, and when one
	// more would pass a limit of q it writes nothing and returns
	// q.Admit's error (wrapping ErrQuota). The count and the insert are
	// serialized per company across every process sharing the store (the
	// SQL stores: one transaction under the company's lock, PostgreSQL's
	// advisory lock or SQLite's write lock), so concurrent inserts of one
	// company, from any number of replicas, never pass a limit together.
	// The manager passes the zero Quotas when none limit l.Company: the
	// insert then counts nothing.
	InsertLease(ctx context.Context, l *Lease, q Quotas) (holder *Lease, err error)
	// GetLease returns the lease id, or an error wrapping errcode.ErrNotFound.
	GetLease(ctx context.Context, id string) (*Lease, error)
	// UpdateLease replaces the stored lease l.ID if its stored version
	// equals l.Version, and then sets l.Version (and the stored one) to
	// l.Version+1. A stale version, or a ReuseKey or RunKey held by another
	// lease, is an error wrapping errcode.ErrConflict and changes nothing; a missing
	// lease is errcode.ErrNotFound.
	UpdateLease(ctx context.Context, l *Lease) error
	// FindByReuseKey returns the lease holding the reuse key, or an error
	// wrapping errcode.ErrNotFound.
	FindByReuseKey(ctx context.Context, key string) (*Lease, error)
	// FindByRunKey returns the lease holding the run key, or an error
	// wrapping errcode.ErrNotFound.
	FindByRunKey(ctx context.Context, key string) (*Lease, error)
	// ListLeases returns the leases matching f, ordered by AcquiredAt, then
	// ID.
	ListLeases(ctx context.Context, f Filter) ([]*Lease, error)
	// ClaimLease sets the claim of lease id to owner until until, if at now
	// nobody else holds a live claim on it (ClaimedUntil > now), and returns
	// the claimed lease (its Version grown by one). Otherwise it returns an
	// error wrapping ErrClaimed and the lease as stored.
	ClaimLease(ctx context.Context, id, owner string, now, until time.Time) (*Lease, error)
	// ClaimForSweep atomically claims for owner until until, and returns,
	// up to limit leases (limit <= 0: no limit) that need a sweep at now and
	// on which nobody (owner included) holds a live claim: pending_cleanup leases;
	// starting leases whose claim expired; active, retained or released
	// (resumable) leases whose ExpiresAt is set and not after now. A lease
	// is never handed to two claimants whose claims overlap in time.
	ClaimForSweep(ctx context.Context, owner string, now, until time.Time, limit int) ([]*Lease, error)
	// DeleteLease removes lease id if its stored version equals version
	// (compare-and-set): the record of a draft lease once its cleanup is
	// proven (PRB-4). A stale version is an error wrapping errcode.ErrConflict, a
	// missing lease errcode.ErrNotFound; either way nothing is removed.
	DeleteLease(ctx context.Context, id string, version int64) error
	// PruneLeases removes up to limit (limit <= 0: no limit) ended leases
	// (Ended) whose ReleasedAt is set and before before, and on which
	// nobody holds a live claim at before, the earliest released first
	// (then by ID); it returns how many it removed. Its cost should follow
	// what it removes, not the history: the SQL stores read an index of
	// ended leases by release time, memoryStore a heap of them.
	PruneLeases(ctx context.Context, before time.Time, limit int) (int, error)
	// AdoptPooled turns one warm-pool member into l, the adopting
	// lease, in one transaction: a lease in StatusPooled of
	// l.Environment whose Fingerprint equals l.Fingerprint, whose Runner
	// equals l.Runner (both nil, or equal specs) and on which nobody holds
	// a live claim at l.AcquiredAt (the oldest by AcquiredAt, then ID). It
	// sets the member's Status to starting and its Company, Workspace,
	// Run, Policy, ReuseKey, RunKey, Metadata, Replaces, ReplaceReason,
	// AcquiredAt, LastUsedAt, ClaimedBy and ClaimedUntil to l's, grows its
	// Version by one and returns it; its id, provider lease id, labels,
	// config, runner and fingerprint stay (l's other fields are ignored).
	// Of concurrent adoptions (any processes) each member goes to one
	// (LEASE-10). No matching member is an error wrapping
	// errcode.ErrNotFound; a ReuseKey or RunKey another lease holds is an
	// error wrapping errcode.ErrConflict, and nothing changes then. A q
	// that sets a limit is checked as InsertLease checks it: the adoption
	// counts l.Company's live leases in the same step, serialized per
	// company, and one past a limit is q.Admit's error (nothing changes).
	AdoptPooled(ctx context.Context, l *Lease, q Quotas) (*Lease, error)
}

// adopt returns member m as the adoption of l makes it (Store.AdoptPooled).
func adopt(m, a *Lease) *Lease {
	c := m.clone()
	c.Status = StatusStarting
	c.Company, c.Workspace, c.Run, c.Policy = a.Company, a.Workspace, a.Run, a.Policy
	c.ReuseKey, c.RunKey = a.ReuseKey, a.RunKey
	c.Metadata = maps.Clone(a.Metadata)
	c.Replaces, c.ReplaceReason = a.Replaces, a.ReplaceReason
	c.AcquiredAt, c.LastUsedAt = a.AcquiredAt, a.LastUsedAt
	c.ClaimedBy, c.ClaimedUntil = a.ClaimedBy, a.ClaimedUntil
	return c
}

// adoptable reports whether m is a member that the adoption of l may take
// (Store.AdoptPooled), ignoring claims held by nobody live.
func adoptable(m, l *Lease) bool {
	return m.Status == StatusPooled && m.Environment == l.Environment && m.Fingerprint == l.Fingerprint &&
		sameRunner(m.Runner, l.Runner) && m.claimFree("", l.AcquiredAt)
}

func sameRunner(a, b *drivers.RunnerSpec) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// releaseClaimer is the optional method of a Store (see Store).
type releaseClaimer interface {
	// ClaimLeaseForRelease is ClaimLease that, when it claims an active or
	// retained lease, also sets the lease's ExpiresAt to until in the same
	// write. Other statuses are claimed as ClaimLease claims them.
	ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*Lease, error)
}

// Ended reports whether l is terminal and holds nothing: released (and not
// resumable), expired or failed. Its cleanup is proven (or nothing was
// ever allocated), so its record is history: its secrets may go (CFG-7)
// and retention may prune it.
func (l *Lease) Ended() bool {
	switch l.Status {
	case StatusReleased, StatusExpired, StatusFailed:
		return !l.holdsSandbox()
	}
	return false
}

// Filter selects leases in Store.ListLeases. Zero fields match everything.
type Filter struct {
	Company     string
	Environment string
	Run         string
	// ProviderLeaseID matches leases recorded for that sandbox (the
	// manager's orphan sweep looks a listed sandbox up by it).
	ProviderLeaseID string
	// Statuses, if not empty, matches leases in any of these statuses.
	Statuses []Status
	// Live, if set, matches only leases that have not ended (see Ended):
	// starting, active, retained, pending_cleanup, and released leases
	// that keep a resumable sandbox. SQL stores read them through an
	// index, so the cost follows the live leases, not the history.
	Live bool
	// Newest, if set, orders the leases newest first (by AcquiredAt, then
	// ID, both descending) instead of oldest first.
	Newest bool
	// Limit, if above 0, keeps the first Limit leases of that order: a
	// page, such as an environment's newest leases. SQL stores read an
	// environment's page through its index by acquisition time, so its
	// cost follows the page, not the history. Manager.List cuts the page
	// before it leaves out the leases the principal may not read.
	Limit int
}

// match reports whether l matches f (SQL stores translate f into a WHERE
// clause with the same meaning).
func (f Filter) match(l *Lease) bool {
	if f.Company != "" && l.Company != f.Company ||
		f.Environment != "" && l.Environment != f.Environment ||
		f.Run != "" && l.Run != f.Run ||
		f.ProviderLeaseID != "" && l.ProviderLeaseID != f.ProviderLeaseID ||
		f.Live && l.Ended() {
		return false
	}
	if len(f.Statuses) == 0 {
		return true
	}
	for _, s := range f.Statuses {
		if l.Status == s {
			return true
		}
	}
	return false
}

// needsSweep reports whether a sweep at now should work on l (see
// Store.ClaimForSweep), ignoring claims. SQL stores translate it into a
// WHERE clause with the same meaning.
func needsSweep(l *Lease, now time.Time) bool {
	switch l.Status {
	case StatusPendingCleanup:
		return true
	case StatusStarting:
		return !l.ClaimedUntil.After(now)
	case StatusActive, StatusRetained:
		return !l.ExpiresAt.IsZero() && !l.ExpiresAt.After(now)
	case StatusReleased:
		return l.ReuseKey != "" && !l.ExpiresAt.IsZero() && !l.ExpiresAt.After(now)
	}
	return false
}
