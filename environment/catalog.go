package environment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/secretcfg"
)

// options configure a Catalog, an Assignments and a gate: what
// envhook.Options sets (berth.New gives the three the same), with the
// defaults documented there, and the knobs only this package's tests set.
type options struct {
	// TestMode lets environments of test drivers (the "fake" driver) be
	// saved, bound, resolved and leased (CFG-4).
	TestMode bool
	// Authorizer decides every action (AUTH-1); nil: DefaultPolicy.
	Authorizer authz.Authorizer
	// Logger receives one line per mutation (and per refused mutation),
	// and per refused resolution; nil: discard.
	Logger *slog.Logger
	// Health keeps the provider health last measured (CAP-3); nil: an
	// in-memory store private to the service built.
	Health HealthStore
	// Settings reads the instance settings (CFG-9) for the gate; nil:
	// instance.Defaults.
	Settings instance.Reader

	// The catalog's hooks (envhook.Options): the lease manager's and the
	// setup sessions' usage reporters, the host's Protected, the secret
	// keeper shared with the lease manager. Without them nothing else
	// references an environment, nothing but the instance default is
	// protected, and secrets an update supersedes are deleted at once.
	usageReporters []usageReporter
	protected      func(ctx context.Context, env *Environment) string
	secretKeeper   envhook.SecretKeeper

	// The rest is set by this package's tests only (export_test.go).

	// testDrivers names drivers besides "fake" that are for tests only.
	testDrivers []string
	// exclusiveDrivers names drivers that allow at most one environment
	// per instance (CFG-4). nil: ["local"]; a non-nil empty slice: none.
	exclusiveDrivers []string
	// clock stamps created/updated times; nil: the wall clock.
	clock clock.Clock
	// newID returns a fresh environment id (Catalog only); nil: "env_" +
	// 16 random hex digits.
	newID func() string
	// healthTimeout (Catalog only) bounds one provider health measurement;
	// 0: 10 s.
	healthTimeout time.Duration
}

// Catalog is the environment catalog (CFG-1..8): it authorizes every call
// (AUTH-1), validates and normalizes configs through the driver's schema,
// moves pasted secrets into the SecretStore, rejects reserved fields, checks
// revisions, and shows the blast radius of a delete. It is safe for
// concurrent use.
type Catalog struct {
	store     Store
	reg       *drivers.Registry
	secrets   SecretStore
	exclusive []string
	authz     authz.Authorizer
	log       *slog.Logger
	clock     clock.Clock
	newID     func() string
	asg       *Assignments
	reporters []usageReporter
	protected func(context.Context, *Environment) string
	health    HealthStore
	gate      *gate
	healthTTL time.Duration
	keeper    envhook.SecretKeeper
}

// newCatalog returns a catalog over store, the drivers of reg and secrets
// (envhook.NewCatalog).
// asg, if not nil, is the assignment service whose bindings point at the
// catalog's environments: a delete's blast radius shows them, the delete
// clears them (ASG-5) and the instance default is protected from it
// (CFG-7); the catalog calls asg for that through unexported methods, so
// no holder of either service can clear or list bindings without the
// Authorizer. nil means no bindings (a catalog used alone). It panics if
// store, reg or secrets is nil (a programming error of berth).
func newCatalog(store Store, reg *drivers.Registry, secrets SecretStore, asg *Assignments, opts *options) *Catalog {
	if store == nil || reg == nil || secrets == nil {
		panic("environment: a catalog needs a store, a driver registry and a secret store")
	}
	var o options
	if opts != nil {
		o = *opts
	}
	cm := o.common(reg)
	c := &Catalog{
		store: store, reg: reg, secrets: secrets, asg: asg,
		exclusive: o.exclusiveDrivers,
		authz:     cm.authz,
		log:       cm.log,
		clock:     cm.clock,
		newID:     o.newID,
		reporters: slices.Clone(o.usageReporters),
		protected: o.protected,
		health:    cm.health,
		gate:      cm.gate,
		keeper:    o.secretKeeper,
	}
	if c.exclusive == nil {
		c.exclusive = []string{"local"}
	}
	if c.newID == nil {
		c.newID = func() string { return "env_" + randomHex(8) }
	}
	c.healthTTL = o.healthTimeout
	if c.healthTTL <= 0 {
		c.healthTTL = defaultHealthTimeout
	}
	return c
}

// Create saves a new environment (CFG-1): authorize (instance admin or local
// operator, CFG-2), validate name, env vars and metadata (CFG-5), normalize
// the config through the driver's schema (CFG-8), refuse a test driver
// outside test mode and a second environment of an exclusive driver (CFG-4),
// move pasted secrets into the SecretStore (CFG-3), store at revision 1. On
// any error nothing is saved and no secret is left behind. It returns the
// full view.
func (c *Catalog) Create(ctx context.Context, p authz.Principal, req CreateRequest) (*View, error) {
	res := authz.Resource{Kind: authz.ResourceKindEnvironment, Name: req.Name, Driver: req.Driver}
	if err := c.authorize(ctx, p, authz.ActionCreate, res); err != nil {
		return nil, err
	}
	env, err := c.create(ctx, p, req)
	if err != nil {
		c.logFailure(ctx, p, authz.ActionCreate, res, err)
		return nil, err
	}
	c.logMutation(ctx, p, "environment created", env)
	c.saved(ctx, env)
	return c.view(env, true), nil
}

func (c *Catalog) create(ctx context.Context, p authz.Principal, req CreateRequest) (*Environment, error) {
	label := fmt.Sprintf("%q", req.Name)
	if err := validateFields(label, req.Name, req.Description, req.Env, req.Metadata); err != nil {
		return nil, err
	}
	schema, err := c.schemaFor(label, req.Driver)
	if err != nil {
		return nil, err
	}
	exclusive := slices.Contains(c.exclusive, req.Driver)
	if exclusive {
		existing, err := c.store.ListEnvironments(ctx, ListFilter{Driver: req.Driver})
		if err != nil {
			return nil, fmt.Errorf("environment %s: %w", label, err)
		}
		if len(existing) > 0 {
			return nil, &Error{Environment: label, Field: "driver", Err: errcode.ErrConflict,
				Reason: fmt.Sprintf("only one %q environment is allowed per instance and %q (%s) exists", req.Driver, existing[0].Name, existing[0].ID)}
		}
	}
	if err := checkReservedConfig(label, schema, req.Config); err != nil {
		return nil, err
	}
	cfg, err := schema.Normalize(req.Config)
	if err != nil {
		return nil, &ConfigError{Name: req.Name, Err: err}
	}
	if req.Pool != nil {
		d, _ := c.reg.Lookup(req.Driver) // schemaFor found it
		if err := checkPool(label, d, req.Pool); err != nil {
			return nil, err
		}
	}
	if field := storedSecretField(schema, cfg); field != "" {
		return nil, &Error{Environment: label, Field: field, Err: errcode.ErrInvalid,
			Reason: "a new environment cannot point at a stored secret; paste the secret value (CFG-3)"}
	}
	if err := checkIsolation(label, req.RequireIsolation); err != nil {
		return nil, err
	}
	id := c.newID()
	moved, err := c.moveSecrets(ctx, label, id, schema, cfg, nil)
	if err != nil {
		return nil, err
	}
	now := c.clock.Now().UTC()
	env := &Environment{
		ID: id, Name: req.Name, Description: req.Description, Driver: req.Driver,
		Status: StatusActive, Config: cfg, Env: req.Env, Metadata: req.Metadata,
		Revision: 1, CreatedAt: now, UpdatedAt: now, CreatedBy: p.ID, UpdatedBy: p.ID,
		Pool: clonePool(req.Pool), RequireIsolation: req.RequireIsolation,
	}
	env = cloneEnvironment(env)
	if err := c.store.CreateEnvironment(ctx, env, exclusive); err != nil {
		c.dropSecrets(ctx, moved)
		return nil, fmt.Errorf("environment %s: %w", label, err)
	}
	return env, nil
}

// Get returns one environment: the full view (config with secret references
// only, env vars, metadata) for principals allowed ActionReadConfig, the
// redacted view (no config, no env vars, no metadata, CFG-2) for those
// allowed only ActionRead, and an error wrapping ErrDenied otherwise. A
// missing environment is errcode.ErrNotFound, reported only to principals allowed to
// read.
func (c *Catalog) Get(ctx context.Context, p authz.Principal, id string) (*View, error) {
	env, err := c.load(ctx, p, authz.ActionRead, id)
	if err != nil {
		return nil, err
	}
	full := c.authz.Authorize(ctx, p, authz.ActionReadConfig, resourceOf(env)) == nil
	return c.withHealth(ctx, c.view(env, full), env)
}

// List returns the environments matching f, sorted by name then id, each as
// Get would show it to p. It reads only the store: no driver or provider is
// called (CAP-1).
func (c *Catalog) List(ctx context.Context, p authz.Principal, f ListFilter) ([]*View, error) {
	if err := c.authorize(ctx, p, authz.ActionRead, authz.Resource{Kind: authz.ResourceKindEnvironment}); err != nil {
		return nil, err
	}
	envs, err := c.store.ListEnvironments(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("environment: list: %w", err)
	}
	out := make([]*View, 0, len(envs))
	for _, env := range envs {
		if c.authz.Authorize(ctx, p, authz.ActionRead, resourceOf(env)) != nil {
			continue
		}
		full := c.authz.Authorize(ctx, p, authz.ActionReadConfig, resourceOf(env)) == nil
		v, err := c.withHealth(ctx, c.view(env, full), env)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Drivers returns the drivers registered in this instance, sorted by name, as the catalog's availability gate sees them: a driver
// that reports itself unavailable, or a test driver (the "fake" driver)
// outside test mode (CFG-4), is unavailable with no effective
// capabilities and a Reason wrapping drivers.ErrUnavailable's text. The
// instance settings (CFG-9) are not applied: instance.Settings.Admit says
// whether they let a driver's targets be used. It needs ActionRead on
// environments, as List does, and calls no provider (CAP-1).
func (c *Catalog) Drivers(ctx context.Context, p authz.Principal) ([]drivers.DriverInfo, error) {
	if err := c.authorize(ctx, p, authz.ActionRead, authz.Resource{Kind: authz.ResourceKindEnvironment}); err != nil {
		return nil, err
	}
	infos := c.reg.List()
	for i, info := range infos {
		if err := c.gate.driverStatus(info.Name); err != nil && info.Available {
			infos[i].Available, infos[i].Reason, infos[i].Effective = false, err.Error(), 0
		}
	}
	return infos, nil
}

// resolvedConfig loads environment id and returns it together with its
// config normalized by the driver's schema and its secret references resolved
// to values: the config a driver's Acquire takes. It is not exported (no
// host reaches secret values through berth's API; the lease manager
// resolves them itself, and other packages get only a scrubber): it does no
// authorization, and the returned Config holds secret
// values that must not be logged or shown (the returned Environment holds
// references only). It fails with errcode.ErrNotFound, with drivers.ErrUnavailable
// when the driver is not registered or is a test driver outside test mode,
// and with a ConfigError naming the environment and field when the stored
// config no longer validates (CFG-8). Archived environments are returned
// too.
func (c *Catalog) resolvedConfig(ctx context.Context, id string) (*Environment, config.Config, error) {
	env, err := c.store.GetEnvironment(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	label := labelOf(env)
	schema, err := c.schemaFor(label, env.Driver)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := schema.Normalize(env.Config)
	if err != nil {
		return nil, nil, &ConfigError{ID: env.ID, Name: env.Name, Err: err}
	}
	if plain := secretcfg.PlainSecrets(schema, cfg); len(plain) > 0 {
		return nil, nil, &Error{Environment: label, Field: "config." + plain[0], Err: errcode.ErrInvalid,
			Reason: "stored config holds an inline secret instead of a reference; update the environment"}
	}
	resolved, err := secretcfg.ResolveSecrets(ctx, schema, cfg, c.secrets.Get)
	if err != nil {
		return nil, nil, fmt.Errorf("environment %s: %w", label, err)
	}
	env.Config = cfg
	return env, resolved, nil
}

// draft validates req as Create would (fields, driver, test mode, schema)
// without saving anything or touching the secret store, for draft probes of
// an unsaved config (PRB-4). It needs ActionProbe (PRB-7). The name may be
// empty. It returns the driver and the normalized config, whose secret
// fields still hold the pasted values: the config must not be logged or
// shown. A config pointing at a stored secret is refused.
func (c *Catalog) draft(ctx context.Context, p authz.Principal, req CreateRequest) (drivers.Driver, config.Config, error) {
	if err := c.authorize(ctx, p, authz.ActionProbe, authz.Resource{Kind: authz.ResourceKindEnvironment, Name: req.Name, Driver: req.Driver}); err != nil {
		return nil, nil, err
	}
	name := req.Name
	if name == "" {
		name = "draft"
	}
	label := fmt.Sprintf("%q", name)
	if err := validateFields(label, name, req.Description, req.Env, req.Metadata); err != nil {
		return nil, nil, err
	}
	schema, err := c.schemaFor(label, req.Driver)
	if err != nil {
		return nil, nil, err
	}
	if err := checkReservedConfig(label, schema, req.Config); err != nil {
		return nil, nil, err
	}
	cfg, err := schema.Normalize(req.Config)
	if err != nil {
		return nil, nil, &ConfigError{Name: name, Err: err}
	}
	if field := storedSecretField(schema, cfg); field != "" {
		return nil, nil, &Error{Environment: label, Field: field, Err: errcode.ErrInvalid,
			Reason: "a draft cannot point at a stored secret; paste the value or probe the saved environment"}
	}
	d, err := c.reg.Lookup(req.Driver)
	if err != nil {
		return nil, nil, err
	}
	return d, cfg, nil
}

// load reads environment id and authorizes a on it. A missing environment is
// reported as denied to principals who may not perform a at all, so that
// existence does not leak.
func (c *Catalog) load(ctx context.Context, p authz.Principal, a authz.Action, id string) (*Environment, error) {
	env, err := c.store.GetEnvironment(ctx, id)
	if err != nil {
		if aerr := c.authorize(ctx, p, a, authz.Resource{Kind: authz.ResourceKindEnvironment, ID: id}); aerr != nil {
			return nil, aerr
		}
		if errors.Is(err, errcode.ErrNotFound) {
			err = &errcode.Error{Message: fmt.Sprintf("Could not find environment %s: check the id or name.", id), Err: err}
		}
		return nil, err
	}
	if err := c.authorize(ctx, p, a, resourceOf(env)); err != nil {
		return nil, err
	}
	return env, nil
}

// Authorize decides whether p may perform a on r with the catalog's
// Authorizer, so that the layers above (probe, hosts) decide with the same
// policy. A refusal wraps ErrDenied and is logged for mutations and probes.
func (c *Catalog) Authorize(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
	return c.authorize(ctx, p, a, r)
}

// authorize asks the Authorizer and makes sure a refusal wraps ErrDenied
// even if a host's Authorizer forgot to.
func (c *Catalog) authorize(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
	err := c.authz.Authorize(ctx, p, a, r)
	if err == nil {
		return nil
	}
	if !errors.Is(err, errcode.ErrDenied) {
		err = fmt.Errorf("%w: %w", authz.Denied(p, a, r), err)
	}
	if a.IsMutation() || a == authz.ActionProbe {
		c.log.LogAttrs(ctx, slog.LevelWarn, "environment action denied",
			slog.String("action", string(a)), slog.String("resource", r.String()),
			slog.String("actor", p.ID), slog.String("role", string(p.Role)))
	}
	return err
}

// schemaFor returns the schema of a registered, usable driver.
func (c *Catalog) schemaFor(label, driver string) (*config.Schema, error) {
	if driver == "" {
		return nil, &Error{Environment: label, Field: "driver", Reason: "required", Err: errcode.ErrInvalid}
	}
	d, err := c.reg.Lookup(driver)
	if err != nil {
		return nil, &Error{Environment: label, Field: "driver", Err: errors.Join(errcode.ErrInvalid, err),
			Reason: fmt.Sprintf("driver %q is not registered in this instance (%v)", driver, drivers.ErrUnavailable)}
	}
	if c.gate.isTestDriver(driver) && !c.gate.testMode {
		return nil, &Error{Environment: label, Field: "driver", Err: errors.Join(errcode.ErrInvalid, drivers.ErrUnavailable),
			Reason: fmt.Sprintf("driver %q is for tests only and cannot be saved as a working target unless the host enables test mode (CFG-4)", driver)}
	}
	return d.Schema(), nil
}

func (c *Catalog) logMutation(ctx context.Context, p authz.Principal, msg string, env *Environment) {
	c.log.LogAttrs(ctx, slog.LevelInfo, msg,
		slog.String("id", env.ID), slog.String("name", env.Name), slog.String("driver", env.Driver),
		slog.String("status", string(env.Status)), slog.Int64("revision", env.Revision),
		slog.String("actor", p.ID), slog.String("role", string(p.Role)))
}

func (c *Catalog) logFailure(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource, err error) {
	c.log.LogAttrs(ctx, slog.LevelWarn, "environment "+string(a)+" failed",
		slog.String("resource", r.String()), slog.String("actor", p.ID),
		slog.String("role", string(p.Role)), slog.String("error", err.Error()))
}

// labelOf names a saved environment: `"name" (id)`.
func labelOf(env *Environment) string { return fmt.Sprintf("%q (%s)", env.Name, env.ID) }
