package environment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// Status is the lifecycle status of an environment.
type Status string

const (
	// StatusActive environments can be bound and leased.
	StatusActive Status = "active"
	// StatusArchived environments are kept for history; they cannot be
	// bound or leased (ASG-2).
	StatusArchived Status = "archived"
)

// Environment is a saved execution target: an instance-scoped catalog record
// (CFG-1). Config is normalized by the driver's schema and never holds a
// secret value: secret fields hold config.SecretRef values (CFG-3).
type Environment struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Driver      string            `json:"driver"`
	Status      Status            `json:"status"`
	Config      config.Config     `json:"config,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Revision starts at 1 and grows by one on every update (CFG-6).
	Revision  int64     `json:"revision"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	CreatedBy string    `json:"createdBy,omitempty"` // actor id
	UpdatedBy string    `json:"updatedBy,omitempty"` // actor id
	// ActiveTemplate is the active captured template (IMG-6, IMG-8): a
	// server-owned field (CFG-5) that only the templates package changes, by a
	// compare-and-swap on Revision that bumps it (CFG-6); nil for none.
	// Catalog updates keep it as stored. Reads fill its Drift.
	ActiveTemplate *ActiveTemplate `json:"activeTemplate,omitempty"`
	// Pool is the warm pool setting (a knob: no identity, no qualification
	// effect), nil for none. See Pool.
	Pool *Pool `json:"pool,omitempty"`
	// RequireIsolation is the least isolation this environment's target
	// must declare (drivers.IsolationOf on its config) to be acquired,
	// probed or resolved, for every principal; the instance settings'
	// MinimumIsolation applies as well (container at least under
	// enableManagedSandboxOnly), and the highest is the minimum. A target below it is refused before anything is allocated,
	// with the reason isolation_below_minimum. drivers.IsolationNone, the
	// zero value, requires nothing. A policy, not identity: changing it
	// keeps the qualification.
	RequireIsolation drivers.Isolation `json:"requireIsolation,omitempty"`
}

// Drift says whether the active template applies to the environment's
// current config (IMG-6).
type Drift string

// The drift states, with the source description's words.
const (
	// DriftNone: no template is active.
	DriftNone Drift = "none"
	// DriftRelinked: the active template applies, its source fingerprint
	// equals the config's current one; leases start from it.
	DriftRelinked Drift = "relinked"
	// DriftDetached: a source field changed since the capture; leases
	// start from the configured image until the change is undone.
	DriftDetached Drift = "detached"
)

// ActiveTemplate is the pointer to an environment's active template. In
// JSON reads it is {id, identity, drift}; the source fingerprint it was
// captured from is stored but never shown.
type ActiveTemplate struct {
	// ID is the template's id (package templates).
	ID string `json:"id"`
	// Identity is the template's image identity in its text form
	// (images.Identity.String).
	Identity string `json:"identity"`
	// SourceFingerprint is the environment's source fingerprint
	// (qualify.SourceFingerprint) when the template was captured.
	SourceFingerprint string `json:"-"`
	// Drift is computed by reads from the config (see Drift); a
	// store neither keeps nor reads it.
	Drift Drift `json:"drift,omitempty"`
}

// Errors of the environment package's contract (stores return them too).
var (
	// ErrNoBinding is returned (wrapped) by Resolve when no binding
	// applies to a scope. It wraps errcode.ErrNotFound. Resolve never substitutes
	// the local host or any other environment for a missing binding
	// (ASG-2).
	ErrNoBinding error = &errcode.Error{Reason: "no_binding", Err: fmt.Errorf("no environment bound: %w", errcode.ErrNotFound)}
	// ErrArchived is wrapped by the *Error of Resolve when the bound environment
	// is archived (ASG-2).
	ErrArchived error = &errcode.Error{Code: errcode.Conflict, Reason: "archived", Err: errors.New("environment: archived")}
	// ErrTargetMismatch is wrapped by Resolution.CheckLease when a lease does
	// not belong to the resolution it is used for (ASG-4). It wraps
	// errcode.ErrConflict.
	ErrTargetMismatch error = &errcode.Error{Reason: "target_mismatch", Err: fmt.Errorf("lease does not match the resolved target: %w", errcode.ErrConflict)}

	// errStaleRevision is the cause of an update or delete at a base
	// revision that is not the stored one: a conflict with the reason
	// stale_revision (docs/errors.md).
	errStaleRevision error = &errcode.Error{Code: errcode.Conflict, Reason: "stale_revision", Err: errors.New("stale revision")}
)

// ListFilter selects environments in Store.ListEnvironments. Zero fields
// match everything.
type ListFilter struct {
	Driver string
	Status Status
}

// Store persists environments. Implementations: the memory store in this
// package, and SQLite and PostgreSQL in store/sqlite and store/postgres; all pass the
// environment/environmenttest conformance suite. A Store is safe for concurrent use;
// it stores and returns deep copies, never the caller's maps.
type Store interface {
	// CreateEnvironment inserts env (Revision must be 1). It returns an
	// error wrapping errcode.ErrConflict if the id or name is taken, or if
	// exclusiveDriver and an environment of env.Driver exists: the check
	// is atomic with the insert (one local environment per instance,
	// CFG-4).
	CreateEnvironment(ctx context.Context, env *Environment, exclusiveDriver bool) error
	// GetEnvironment returns the environment, or an error wrapping errcode.ErrNotFound.
	GetEnvironment(ctx context.Context, id string) (*Environment, error)
	// ListEnvironments returns the matching environments sorted by name, then id.
	ListEnvironments(ctx context.Context, f ListFilter) ([]*Environment, error)
	// UpdateEnvironment replaces the stored environment env.ID if its stored
	// revision equals baseRevision; env.Revision must be baseRevision+1.
	// Otherwise it returns an error wrapping errcode.ErrConflict and changes nothing
	// (errcode.ErrNotFound if there is no such environment).
	UpdateEnvironment(ctx context.Context, env *Environment, baseRevision int64) error
	// DeleteEnvironment removes env id if its stored revision equals
	// baseRevision, else errcode.ErrConflict (errcode.ErrNotFound if absent).
	DeleteEnvironment(ctx context.Context, id string, baseRevision int64) error
}

// resourceOf describes env as an authorization resource.
func resourceOf(env *Environment) authz.Resource {
	if env == nil {
		return authz.Resource{Kind: authz.ResourceKindEnvironment}
	}
	return authz.Resource{Kind: authz.ResourceKindEnvironment, ID: env.ID, Name: env.Name, Driver: env.Driver}
}
