// Package envhook carries the environment package's hooks that only
// berth's own packages call (CONVENTIONS 24): the constructors of the
// catalog, the assignments, the availability gate and the secret keeper
// that berth.New composes, the memory stores behind store.Memory and
// berth's own tests, what the lease layer asks the assignments, the
// health cache they share, and the probe's draft validation, scrubber and
// availability checks. No host or driver author needs them: a host gets
// the catalog and the assignments from berth.New (System.Catalog,
// System.Assignments), the memory stores from store.Memory, and the
// prober from System.Prober.
//
// Package environment sets every variable in its init, so they are never
// nil in a program that imports environment. The arguments and results
// typed any are environment's own types (this package sits below
// environment and cannot name them); each variable says which, and a
// wrong type panics.
package envhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/instance"
)

// Options configure a catalog, an assignments service and a gate; berth.New
// gives the three the same test mode, Authorizer, health store and
// instance settings Reader, so that they agree. The zero value gives the
// defaults documented on each field; the catalog's own fields are ignored
// by the others.
type Options struct {
	// TestMode lets environments of test drivers (the "fake" driver) be
	// saved, bound, resolved and leased (CFG-4). Default false.
	TestMode bool
	// Authorizer decides every action (AUTH-1). Default
	// authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Logger receives one line per mutation (and per refused mutation),
	// and per refused resolution; never a config value, an env var value
	// or a secret. Default: discard.
	Logger *slog.Logger
	// Health is the environment.HealthStore of the provider health last
	// measured (CAP-3), shown in listings and read by the gate. Default:
	// an in-memory store private to the service built.
	Health any
	// Settings reads the instance settings (CFG-9) for the gate. Default
	// nil: instance.Defaults.
	Settings instance.Reader

	// Keeper (catalog only), if not nil, keeps the secrets an update
	// supersedes or a delete gives up while a lease not proven clean uses
	// them (CFG-7, LEASE-9); nil: they are deleted at once.
	Keeper SecretKeeper
	// Reporters (catalog only) are UsageReporter values that
	// tell what else references an environment (leases, setup sessions);
	// those that are also ReferenceClearers are cleared on delete.
	Reporters []any
	// Protected (catalog only), a func(context.Context,
	// *environment.Environment) string or nil, names why an environment
	// may never be deleted.
	Protected any
}

// SecretKeeper deletes a secret (or version) from the secret store only
// once no saved config and no lease that is not proven clean references it
// (CFG-7, LEASE-9). The catalog retires what a saved config stops
// referencing, and the lease manager records the references of each lease
// record and releases them once the lease is proven clean; berth.New gives
// both the one keeper NewSecretKeeper returns. It is safe for concurrent
// use.
type SecretKeeper interface {
	// Use records that lease uses the secret references of cfg (secret
	// fields and secret-map values). Call it before the lease record
	// holding cfg is written; an error means nothing may be written that
	// depends on them.
	Use(ctx context.Context, lease string, cfg config.Config) error
	// Release drops the uses of lease, which is proven clean, and deletes
	// the retired secrets that no lease uses any more.
	Release(ctx context.Context, lease string) error
	// Retire marks refs as referenced by no saved config and deletes those
	// that no lease uses; the others go with the Release of the last lease
	// that uses them. If the uses cannot be read, nothing is deleted.
	Retire(ctx context.Context, refs []config.SecretRef) error
}

// ReferenceClearer is what a usage reporter (Options.Reporters) that owns
// references which must go with an environment also implements: the
// catalog's Delete calls ClearEnvironment once the environment is gone.
// Reporters without it keep their references (leases and sessions end by
// their own rules).
type ReferenceClearer interface {
	// ClearEnvironment removes every reference to envID it owns. It is
	// idempotent.
	ClearEnvironment(ctx context.Context, envID string) error
}

var (
	// NewAssignments returns the *environment.Assignments over bindings (an
	// environment.BindingStore), the environments of envs (an
	// environment.Store) and the drivers of reg, with o (nil: defaults).
	// It panics if one of them is nil.
	NewAssignments func(bindings, envs any, reg *drivers.Registry, o *Options) any

	// NewCatalog returns the *environment.Catalog over envs (an
	// environment.Store), the drivers of reg and secrets (an
	// environment.SecretStore), with o (nil: defaults). asg, an
	// *environment.Assignments or nil, is the assignment service whose
	// bindings the catalog shows in a delete's blast radius, clears after
	// the delete (ASG-5) and protects (the instance default, CFG-7). It
	// panics if envs, reg or secrets is nil.
	NewCatalog func(envs any, reg *drivers.Registry, secrets, asg any, o *Options) any

	// NewGate returns the availability gate (an *environment.gate, which
	// only this package's functions take) over the drivers of reg; it reads
	// TestMode, Health and Settings of o (nil: defaults): give it the
	// Options of the catalog and the assignments. Resolution, probes and
	// leases pass the one gate (CAP-3).
	NewGate func(reg *drivers.Registry, o *Options) any

	// NewSecretKeeper returns the keeper that records uses in uses (an
	// environment.SecretUseStore) and deletes from secrets (an
	// environment.SecretStore); log (nil: discard) gets a line for every
	// deletion that failed, naming the reference only.
	NewSecretKeeper func(uses, secrets any, log *slog.Logger) SecretKeeper

	// NewMemoryStore returns an empty in-memory environment.Store: what
	// store.Memory uses, and berth's own tests. Like the other memory
	// stores here, it passes its environment/environmenttest suite.
	NewMemoryStore func() any

	// NewMemoryBindingStore returns an empty in-memory
	// environment.BindingStore (store.Memory's).
	NewMemoryBindingStore func() any

	// NewMemoryHealthStore returns an empty in-memory
	// environment.HealthStore (store.Memory's).
	NewMemoryHealthStore func() any

	// NewMemorySecretUseStore returns an empty in-memory
	// environment.SecretUseStore (store.Memory's).
	NewMemorySecretUseStore func() any

	// NewMemorySecretStore returns an empty in-memory
	// environment.SecretStore: berth.New's when Options.Secrets is nil
	// (memory stores, or Options.MemorySecrets).
	NewMemorySecretStore func() any

	// CachedHealth wraps st (an environment.HealthStore) with a cache of
	// its reads for the gate, which reads an environment's provider health
	// on every lease: a record, or its absence, is answered from the cache
	// for up to maxStaleness (one second when 0). A put through the
	// wrapper replaces the cached record at once; another process's
	// measurement is seen within maxStaleness. A negative maxStaleness
	// returns st. Lists are not cached. The result is an
	// environment.HealthStore.
	CachedHealth func(st any, maxStaleness time.Duration) any

	// Authorize decides whether p may perform a on r with the Authorizer
	// of asg (an *environment.Assignments, the catalog's), so that the
	// lease layer decides with the same policy. A refusal wraps
	// errcode.ErrDenied.
	Authorize func(asg any, ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error

	// LeaseTarget authorizes p to lease a target through asg (an
	// *environment.Assignments) and returns the environment record (an
	// *environment.Environment, secret references only) and the company
	// the lease is for. The target is the environment bound to scope
	// (scope not nil; company "" or the scope's) or environment envID
	// leased for company (scope nil; company required): exactly one of the
	// two, else errcode.ErrInvalid. It asks for authz.ActionLease with the
	// Company (and Scope) set; through a scope, the binding is resolved as
	// Assignments.Resolve does (ASG-1..3); by id, the environment must
	// exist and be active. A company never leases an environment bound only
	// to other companies (errcode.ErrDenied, naming neither). It never
	// calls a provider.
	LeaseTarget func(asg any, ctx context.Context, p authz.Principal, scope *authz.Scope, envID, company string, required drivers.Set) (env any, leaseCompany string, err error)

	// AdmitDraft authorizes p, through asg (an *environment.Assignments),
	// to lease a draft (an unsaved config) of driver for company: it asks
	// for authz.ActionProbe on the draft, then for the instance settings'
	// admission (CFG-9, as Admit). A driver that is not registered passes
	// here; the lease layer refuses it. It never calls a provider.
	AdmitDraft func(asg any, ctx context.Context, p authz.Principal, driver, company string, cfg map[string]any) error

	// Draft validates a draft config as Catalog.Create would (driver,
	// test mode, schema) without saving anything or touching the secret
	// store, for draft probes (PRB-4); cat is an *environment.Catalog. It
	// needs ActionProbe (PRB-7). It returns the driver and the normalized
	// config, whose secret fields still hold the pasted values: it must
	// not be logged or shown. A config pointing at a stored secret is
	// refused.
	Draft func(cat any, ctx context.Context, p authz.Principal, driver string, cfg map[string]any) (drivers.Driver, config.Config, error)

	// Scrubber returns a function that replaces, in a text, every secret
	// value that environment id's config holds with config.Redacted; cat
	// is an *environment.Catalog. It needs ActionProbe. The values stay
	// inside the function.
	Scrubber func(cat any, ctx context.Context, p authz.Principal, id string) (func(string) string, error)

	// Check returns env's driver and effective capability set when env (an
	// *environment.Environment) can be a working target for gate (what
	// NewGate returns) and its effective set covers required, else an
	// *environment.Error naming env.
	Check func(gate any, ctx context.Context, env any, required drivers.Set) (drivers.Driver, drivers.Set, error)

	// Admit returns nil when the instance settings (CFG-9) that gate (what
	// NewGate returns) reads let targets of driver d become working
	// targets, else an error wrapping drivers.ErrUnavailable and
	// instance.ErrEnvironmentsDisabled (d may be nil to ask only that) or
	// instance.ErrManagedSandboxOnly (d is a host driver): the part of
	// Check that needs no environment, for drafts; with d set, also the
	// reason isolation_below_minimum when d declares for cfg less
	// isolation than the instance's minimumIsolation. A failing settings
	// read is returned, never taken as "enabled".
	Admit func(gate any, ctx context.Context, d drivers.Driver, cfg map[string]any) error

	// AdmitEnvironment is Admit for the saved environment env (an
	// *environment.Environment) of driver d: its refusal names the
	// environment, and the environment's requireIsolation counts too.
	AdmitEnvironment func(gate any, ctx context.Context, d drivers.Driver, env any) error

	// SourceFingerprint returns the source fingerprint of env (an
	// *environment.Environment) for its driver d: the driver, the schema's
	// identity fields, the account (secret references with their
	// versions) and the normalized image; never knobs, metadata or names.
	// It does no I/O. An active template applies while its
	// SourceFingerprint equals the environment's (IMG-6).
	SourceFingerprint func(env any, d drivers.Driver) string

	// AppliedTemplate returns a copy of the active template of env (an
	// *environment.Environment) with its Drift (an
	// *environment.ActiveTemplate) when it applies to env's current config
	// (drift relinked), else nil: what a lease starts from and what the
	// qualification fingerprint covers (IMG-8).
	AppliedTemplate func(env any, d drivers.Driver) any
)

// UsageReporter reports what references an environment, for the catalog's
// blast radius (CFG-7), U being environment.Usage: the lease manager's and
// the templates service's constructors return one (leasehook.New,
// templatehook.New) and berth.New wires them into the catalog
// (Options.Reporters). It answers for no principal (the catalog
// authorizes BlastRadius and Delete before it asks) and reads records
// only: it never calls a provider (CAP-1). The catalog's use of its
// optional methods (EnvironmentArchived, EnvironmentSaved,
// ReferenceClearer) is documented in package environment (delete.go).
type UsageReporter[U any] interface {
	EnvironmentUsage(ctx context.Context, envID string) (U, error)
}
