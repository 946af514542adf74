package environment

import (
	"time"

	"github.com/berthdev/berth/authz"

	"context"

	"github.com/berthdev/berth/internal/clock"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/envhook"
)

// ResolvedConfigForTest exposes the unexported resolved config to this
// package's external tests (the export_test.go pattern); it is compiled
// only into tests.
func ResolvedConfigForTest(c *Catalog, ctx context.Context, id string) (*Environment, config.Config, error) {
	return c.resolvedConfig(ctx, id)
}

// Protected exposes the catalog's protection hook of a (instance default)
// to this package's external tests.
func Protected(a *Assignments, ctx context.Context, env *Environment) string {
	return a.protected(ctx, env)
}

// The CFG-5 and secret-name rules, for this package's external tests.
var (
	IsReservedMetadataKey = isReservedMetadataKey
	LooksLikeSecretName   = looksLikeSecretName
	ReservedFields        = reservedFieldsCopy
)

// TestOptions are the fields of Options that only this package's tests set.
type TestOptions struct {
	TestDrivers      []string
	ExclusiveDrivers []string
	Clock            clock.Clock
	NewID            func() string
	HealthTimeout    time.Duration
}

// WithTestOptions returns o (a new Options when nil) with the non-nil,
// non-zero fields of t set.
func WithTestOptions(o *Options, t TestOptions) *Options {
	if o == nil {
		o = &Options{}
	}
	if t.TestDrivers != nil {
		o.testDrivers = t.TestDrivers
	}
	if t.ExclusiveDrivers != nil {
		o.exclusiveDrivers = t.ExclusiveDrivers
	}
	if t.Clock != nil {
		o.clock = t.Clock
	}
	if t.NewID != nil {
		o.newID = t.NewID
	}
	if t.HealthTimeout != 0 {
		o.healthTimeout = t.HealthTimeout
	}
	return o
}

// SecretInfo describes a secret of a memory SecretStore, for tests.
type SecretInfo = secretInfo

// ListSecrets lists the secrets of s, a NewMemorySecretStore, sorted by id.
func ListSecrets(s SecretStore) []SecretInfo { return s.(*memorySecretStore).list() }

// LeaseTargetRequest is the request of LeaseTargetFor.
type LeaseTargetRequest = leaseTargetRequest

// LeaseTargetFor is Assignments.LeaseTarget with its arguments in a struct
// and its result with the scope's resolution, for this package's tests.
func LeaseTargetFor(a *Assignments, ctx context.Context, p authz.Principal, req LeaseTargetRequest) (*leaseTarget, error) {
	return a.leaseTarget(ctx, p, req)
}

// SetBinding is the request of Bind: Assignments.Set's binding and base
// revision in one struct, for this package's tests.
type SetBinding struct {
	Kind          BindingKind
	Key           string
	Company       string
	EnvironmentID string
	BaseRevision  int64
}

// Bind is a.Set with req.
func Bind(a *Assignments, ctx context.Context, p authz.Principal, req SetBinding) (*Binding, error) {
	return a.Set(ctx, p, Binding{BindingRef: BindingRef{Kind: req.Kind, Key: req.Key, Company: req.Company}, EnvironmentID: req.EnvironmentID}, req.BaseRevision)
}

// The hooks only berth's own packages call (internal/envhook), under their
// former exported names for this package's external tests.

func (c *Catalog) Draft(ctx context.Context, p authz.Principal, req CreateRequest) (drivers.Driver, config.Config, error) {
	return c.draft(ctx, p, req)
}

func (c *Catalog) Scrubber(ctx context.Context, p authz.Principal, id string) (func(string) string, error) {
	return c.scrubber(ctx, p, id)
}

func (g *Gate) Check(ctx context.Context, env *Environment, required drivers.Set) (drivers.Driver, drivers.Set, error) {
	return g.check(ctx, env, required)
}

var CachedHealthStore = cachedHealthStore

// WireCatalog sets the catalog hooks berth.New wires (envhook.Options'
// Keeper, Reporters and Protected).
func (o *Options) WireCatalog(keeper *SecretKeeper, reporters []usageReporter, protected func(context.Context, *Environment) string) {
	o.secretKeeper = nil
	if keeper != nil {
		o.secretKeeper = keeper
	}
	o.usageReporters, o.protected = reporters, protected
}

// The constructors, types and methods berth.New and berth's other packages
// reach through internal/envhook, under their former exported names for
// this package's external tests.

type (
	Options          = options
	Gate             = gate
	SecretKeeper     = secretKeeper
	TargetReader     = targetReader
	ReferenceClearer = envhook.ReferenceClearer
)

var (
	NewCatalog              = newCatalog
	NewAssignments          = newAssignments
	NewGate                 = newGate
	NewSecretKeeper         = newSecretKeeper
	NewMemoryStore          = newMemoryStore
	NewMemoryBindingStore   = newMemoryBindingStore
	NewMemoryHealthStore    = newMemoryHealthStore
	NewMemorySecretUseStore = newMemorySecretUseStore
	NewMemorySecretStore    = newMemorySecretStore
)

func (a *Assignments) LeaseTarget(ctx context.Context, p authz.Principal, scope *authz.Scope, environmentID, company string, required drivers.Set) (*Environment, string, error) {
	t, err := a.leaseTarget(ctx, p, leaseTargetRequest{EnvironmentID: environmentID, Company: company, Scope: scope, Required: required})
	if err != nil {
		return nil, "", err
	}
	return t.Environment, t.Company, nil
}

func (a *Assignments) AdmitDraft(ctx context.Context, p authz.Principal, driver, company string) error {
	return a.admitDraft(ctx, p, driver, company, nil)
}

func (a *Assignments) Authorize(ctx context.Context, p authz.Principal, act authz.Action, r authz.Resource) error {
	return a.authorize(ctx, p, act, r)
}

func (e *Environment) SourceFingerprint(d drivers.Driver) string { return e.sourceFingerprint(d) }

func (e *Environment) AppliedTemplate(d drivers.Driver) *ActiveTemplate { return e.appliedTemplate(d) }

func (g *gate) DriverStatus(name string) error { return g.driverStatus(name) }

func (g *gate) Admit(ctx context.Context, d drivers.Driver) error { return g.admit(ctx, d, nil) }

func (ref BindingRef) ID() string { return ref.id() }

// UsageReporter is the catalog's usage hook (usageReporter).
type UsageReporter = usageReporter
