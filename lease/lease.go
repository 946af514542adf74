package lease

import (
	"errors"
	"maps"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
)

// Status is the lifecycle status of a lease (LEASE-1).
//
// The SPEC's statuses are active, released, expired, failed, retained and
// pending_cleanup. The lease package adds one internal status, starting: the
// write-ahead record (LEASE-2) of an acquisition whose sandbox is being
// created or resumed. A starting lease is shown as "pending" to operators; it
// becomes active when the sandbox runs, failed or pending_cleanup when the
// start fails, or retained when a reusable start outlived its budget. A
// starting lease whose owner vanished (a crash: its claim expired) is turned
// into pending_cleanup by the next Sweep.
type Status string

// The lease statuses.
const (
	StatusStarting       Status = "starting"
	StatusActive         Status = "active"
	StatusReleased       Status = "released"
	StatusExpired        Status = "expired"
	StatusFailed         Status = "failed"
	StatusRetained       Status = "retained"
	StatusPendingCleanup Status = "pending_cleanup"
	// StatusPooled is a warm-pool member (SPEC LEASE-1, LEASE-11): a
	// started sandbox of an environment with a pool (environment.Pool),
	// of authz.InstanceCompany, waiting for an acquisition to adopt it. Adoption
	// (Store.AdoptPooled) turns the record itself into the adopting lease.
	StatusPooled Status = "pooled"
)

// Policy says whether a lease's sandbox outlives its run (LEASE-1).
type Policy string

// The lease policies.
const (
	// Ephemeral leases are destroyed (or stopped) at release; never reused.
	Ephemeral Policy = "ephemeral"
	// ReuseByEnvironment leases are reused by later acquisitions of the same
	// company and environment. Needs drivers.CapReuse.
	ReuseByEnvironment Policy = "reuse_by_environment"
	// ReuseByWorkspace leases are reused by later acquisitions of the same
	// company, environment and workspace, and of the same project when the
	// acquisition's Scope names one (another project's run gets a lease of
	// its own). Needs drivers.CapReuse.
	ReuseByWorkspace Policy = "reuse_by_workspace"
	// RetainOnFailure leases are ephemeral, except that releasing one after
	// a failed run keeps the sandbox (retained) for inspection.
	RetainOnFailure Policy = "retain_on_failure"
)

// valid reports whether p is one of the policies.
func (p Policy) valid() bool {
	switch p {
	case Ephemeral, ReuseByEnvironment, ReuseByWorkspace, RetainOnFailure:
		return true
	}
	return false
}

// reusable reports whether leases of p are resumed by later acquisitions.
func (p Policy) reusable() bool { return p == ReuseByEnvironment || p == ReuseByWorkspace }

// The values of Lease.Cleanup: how far the cleanup of a lease's sandbox
// got.
const (
	// cleanupNone: nothing to clean up yet (starting, active, retained).
	cleanupNone = ""
	// cleanupPending: a stop or destroy is owed and not proven yet.
	cleanupPending = "pending"
	// cleanupConfirmed: the provider confirmed the stop or destroy for the
	// lease's provider lease id (LEASE-7), or nothing was ever allocated.
	cleanupConfirmed = "confirmed"
)

// The values of Lease.ReplaceReason: why a reusable lease's recorded
// sandbox was not resumed and a replacement was made (LEASE-4).
const (
	replaceNotFound         = "not_found"
	replaceExpired          = "expired"
	replaceIdentityMismatch = "identity_mismatch"
	// replaceRunnerMismatch: the sandbox was prepared at creation for
	// another runner binary than the acquisition names (Docker's bind
	// mount of Lease.Runner is fixed when the container is created), so it
	// is never run with the old one.
	replaceRunnerMismatch = "runner_mismatch"
	// replaceTemplateChanged: the environment's active template changed
	// (promote, rollback, revoke, drift) since the sandbox was made
	// (IMG-8).
	replaceTemplateChanged = "template_changed"
)

// Label keys that the manager puts on every sandbox it creates (and on
// Lease.Labels), so that sweeps find them at the provider (LEASE-9):
// berth.instance (Options.InstanceID), berth.environment (the environment
// id) and berth.lease (the lease id). labelTemplate and labelPool are the
// ones that say more than the record does (see Lease.Labels).
const (
	labelInstance    = "berth.instance"
	labelEnvironment = "berth.environment"
	labelLease       = "berth.lease"
	// labelTemplate names the active template (package templates) a lease
	// started from; absent for the configured image (IMG-8).
	labelTemplate = "berth.template-id"
	// labelPool is put, with the value "member", on the sandbox and record
	// of every warm-pool member; it stays on the lease that adopts the
	// member (the labels a provider fixes at create stay true).
	labelPool = "berth.pool"
)

// Lease is one use of an environment (LEASE-1). For reusable policies one
// record owns one sandbox across the runs that reuse it: Run is the run that
// acquired it last. Config is a snapshot of the environment's normalized
// config as the sandbox was created from it, holding secret references only
// (never a secret value): cleanup re-resolves the secrets through the host.
type Lease struct {
	ID          string `json:"id"`
	Company     string `json:"company"`
	Environment string `json:"environment"`
	Workspace   string `json:"workspace,omitempty"`
	Run         string `json:"run,omitempty"`
	Status      Status `json:"status"`
	Policy      Policy `json:"policy"`
	// Provider is the driver name.
	Provider string `json:"provider"`
	// ProviderLeaseID is the sandbox's id at the provider; "" until the
	// provider assigned it.
	ProviderLeaseID string `json:"providerLeaseId,omitempty"`

	AcquiredAt time.Time `json:"acquiredAt"`
	LastUsedAt time.Time `json:"lastUsedAt,omitzero"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
	ReleasedAt time.Time `json:"releasedAt,omitzero"`

	// FailureReason says why the lease failed, or why cleanup is pending.
	FailureReason string `json:"failureReason,omitempty"`
	// Cleanup is how far the cleanup got: "" (nothing to clean up yet:
	// starting, active, retained), "pending" (a stop or destroy is owed
	// and not proven yet) or "confirmed" (the provider confirmed the stop
	// or destroy for the lease's provider lease id, LEASE-7, or nothing
	// was ever allocated). CleanupDisposition is what it owes (stop or
	// destroy) while pending.
	Cleanup            string              `json:"cleanup,omitempty"`
	CleanupDisposition drivers.Disposition `json:"cleanupDisposition,omitempty"`
	// AfterCleanup is the status the lease takes once a pending cleanup is
	// proven: released, expired or failed.
	AfterCleanup Status `json:"afterCleanup,omitempty"`
	// CleanupAttempts counts sweeps that tried the pending cleanup.
	CleanupAttempts int `json:"cleanupAttempts,omitempty"`
	// CleanupEvidence is the provider's confirmation note (Receipt.Evidence).
	CleanupEvidence string `json:"cleanupEvidence,omitempty"`
	// CleanupEvidenceKind names what a confirmed cleanup stands on (PRP-6,
	// LEASE-7): drivers.EvidenceProvider (the provider destroyed or
	// stopped the sandbox), drivers.EvidenceCgroup (the lease's runner
	// cgroup emptied and removed by berth's check) or
	// drivers.EvidenceTagScan (berth's own group and tag check from a
	// fresh session). A runner's attestation alone never confirms a
	// cleanup. drivers.EvidenceNone while nothing was proven (a keep
	// release, whose CleanupEvidence says it stopped nothing).
	CleanupEvidenceKind drivers.EvidenceKind `json:"cleanupEvidenceKind,omitempty"`

	// Fingerprint is the reuse fingerprint (LEASE-4): a SHA-256 over the
	// driver name, the identity fields of the environment's config and
	// its secret references with their versions, with the active
	// template's identity as the image while the template applies
	// (IMG-8). Knobs, metadata and secret maps are left out, so that
	// tuning a timeout or rotating an env token keeps a sandbox reusable
	// while changing the image, target or account does not.
	Fingerprint string `json:"fingerprint"`
	// ReuseKey is set while a reusable lease holds a sandbox that later
	// acquisitions may resume; at most one lease of a store holds a key.
	ReuseKey string `json:"reuseKey,omitempty"`
	// RunKey is set while a non-reusable lease is starting or active; at
	// most one lease of a store holds a key (LEASE-8).
	RunKey string `json:"runKey,omitempty"`
	// Replaces is the id of the lease whose sandbox this one replaced, and
	// ReplaceReason why the recorded sandbox was not resumed (LEASE-4):
	// "not_found", "expired", "identity_mismatch" (the reuse fingerprint
	// changed), "runner_mismatch" (the sandbox was prepared at creation
	// for another runner binary than the acquisition names: Docker's bind
	// mount of Lease.Runner) or "template_changed" (the environment's
	// active template changed since the sandbox was made: promote,
	// rollback, revoke, drift; IMG-8).
	Replaces      string `json:"replaces,omitempty"`
	ReplaceReason string `json:"replaceReason,omitempty"`
	// Uses counts the acquisitions that returned this lease.
	Uses int `json:"uses"`

	// Runner is the runner binary the sandbox was acquired for
	// (AcquireRequest.Runner: the set's binary for the target's
	// architecture), nil for a lease without a runner. Handle.Run
	// installs this one; a reusable lease resumed for another binary of a
	// driver that prepares at creation is replaced ("runner_mismatch").
	Runner *drivers.RunnerSpec `json:"runner,omitempty"`

	// Config is the normalized environment config with secret references,
	// recorded for cleanup (LEASE-9). It never holds a secret value.
	Config config.Config `json:"config,omitempty"`
	// Labels are the provider labels put on the sandbox: berth.instance,
	// berth.environment and berth.lease on every one; berth.template-id
	// naming the active template (package templates) the lease started
	// from (absent for the configured image, IMG-8); and berth.pool, with
	// the value "member", on every warm-pool member and the lease that
	// adopted it.
	Labels map[string]string `json:"labels,omitempty"`
	// Metadata is free-form host data.
	Metadata map[string]string `json:"metadata,omitempty"`

	// ClaimedBy and ClaimedUntil mark the manager that works on the lease
	// (acquiring, resuming, cleaning up) so that other replicas keep off it
	// until the claim expires (LEASE-10).
	ClaimedBy    string    `json:"claimedBy,omitempty"`
	ClaimedUntil time.Time `json:"claimedUntil,omitzero"`

	// Holder is the manager (its claim owner prefix) that holds the live
	// session of a host lease (local, ssh), and HolderUntil how long its
	// claim lasts; the holder renews it every 10 seconds while
	// it holds the session. A host session ends only through its holder's
	// handle or a check on the host: a release or sweep by any other
	// manager leaves the lease pending_cleanup naming the holder, never
	// "confirmed" (LEASE-7, LEASE-10).
	Holder      string    `json:"holder,omitempty"`
	HolderUntil time.Time `json:"holderUntil,omitzero"`

	// Draft marks the lease of a draft probe (an unsaved config): its
	// record exists while its sandbox may, and is removed once its cleanup
	// is proven (PRB-4); its Config never holds a secret field.
	Draft bool `json:"draft,omitempty"`

	// Version grows by one on every store update (compare-and-set).
	Version int64 `json:"version"`

	// Redacted reports a record shown to a principal who may read the lease
	// but not the environment's config (Manager.Get, Manager.List): Config,
	// Metadata, Labels, ProviderLeaseID, FailureReason and CleanupEvidence
	// are left out, since they may name the target (an ssh provider lease
	// id is "ssh://user@host:port/dir") (CFG-2), and so is the runner's
	// Binary path on the berth host (its SHA256 and Arch stay). Stores
	// never set it.
	Redacted bool `json:"redacted,omitempty"`
}

// redactCopy returns a copy of l without what may show the environment's
// config (see Redacted), marked Redacted: what a board member or an agent
// of the lease's company sees (CFG-2). Status, policy, times and the
// cleanup status stay.
func (l *Lease) redactCopy() *Lease {
	c := *l
	return c.redact()
}

// redact is redactCopy in place, on a lease struct that nobody else holds (see
// own).
func (l *Lease) redact() *Lease {
	l.Config, l.Metadata, l.Labels = nil, nil, nil
	l.ProviderLeaseID, l.FailureReason, l.CleanupEvidence = "", "", ""
	if l.Runner != nil {
		r := *l.Runner
		r.Binary = "" // a path on the berth host; the sum and arch stay
		l.Runner = &r
	}
	l.Redacted = true
	return l
}

// clone returns a deep copy of l.
func (l *Lease) clone() *Lease {
	if l == nil {
		return nil
	}
	c := *l
	return c.own()
}

// own makes l a deep copy, as clone would return, without copying the
// struct again: for a lease struct that nobody else holds (one a Store
// returned, or the manager's next version of one; see Store), whose maps
// and runner are the store's until then. What the manager's exported
// methods return goes through own or redact.
func (l *Lease) own() *Lease {
	l.Config = l.Config.Clone()
	l.Labels = maps.Clone(l.Labels)
	l.Metadata = maps.Clone(l.Metadata)
	l.Runner = cloneRunner(l.Runner)
	return l
}

// shallow returns a copy of l that shares its maps and runner with l. The
// manager uses it for the next version of a record in which only scalar
// fields change: nothing in this package changes a record's Config,
// Labels, Metadata or Runner in place (a new value is assigned instead), and
// by the Store contract neither does a Store (it may share them with what
// it is given and returns), so sharing them between the versions an
// operation holds is safe and saves a deep copy per store write on the hot
// path.
func (l *Lease) shallow() *Lease {
	c := *l
	return &c
}

// cloneRunner returns a copy of r (nil for nil).
func cloneRunner(r *drivers.RunnerSpec) *drivers.RunnerSpec {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// holdsSandbox reports whether the lease still owns a sandbox at the
// provider that must not be destroyed by an orphan sweep: starting, active,
// retained, pooled, or released by a stop that keeps it resumable.
func (l *Lease) holdsSandbox() bool {
	switch l.Status {
	case StatusStarting, StatusActive, StatusRetained, StatusPooled:
		return true
	case StatusReleased:
		return l.ReuseKey != ""
	}
	return false
}

// claimFree reports whether nobody but owner holds a live claim at now.
func (l *Lease) claimFree(owner string, now time.Time) bool {
	return l.ClaimedBy == "" || l.ClaimedBy == owner || !now.Before(l.ClaimedUntil)
}

// Errors of the lease package's contract.
var (
	// ErrClaimed: another manager holds a live claim on the lease (a
	// Store's ClaimLease returns it).
	ErrClaimed error = &errcode.Error{Code: errcode.Conflict, Reason: "lease_claimed", Err: errors.New("lease: claimed by another manager")}
	// ErrCleanupPending: a release or start failure left the lease pending
	// cleanup; a Sweep retries it (LEASE-6, LEASE-7).
	ErrCleanupPending error = &errcode.Error{Code: errcode.Unavailable, Reason: "cleanup_pending", Err: errors.New("lease: cleanup pending")}
)

// The errors of an acquisition that a host tells apart by their reason
// (errcode.ReasonOf), documented at Manager.Acquire.
var (
	// errPreserved: a reusable lease's sandbox could not be resumed; the
	// lease and its sandbox were kept and nothing replaced them (LEASE-5).
	errPreserved error = &errcode.Error{Code: errcode.Unavailable, Reason: "lease_preserved", Err: errors.New("lease: preserved")}
	// errStartupBudget: the sandbox did not start within the startup
	// budget (LEASE-3).
	errStartupBudget = leasehook.ErrStartupBudget
	// errImageMismatch: the live sandbox does not run the image identity
	// the lease started from (the active template's, IMG-3); the sandbox
	// was destroyed.
	errImageMismatch error = &errcode.Error{Code: errcode.Conflict, Reason: "image_mismatch", Err: errors.New("lease: live image does not match")}
)
