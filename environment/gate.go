package environment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
)

// gate is the one check that decides whether an environment can become a
// working target now (CAP-3, CAP-4, CFG-4, CFG-9, ASG-2). Resolution, probes
// and lease acquisition all pass it, so none of them is a way around
// another. It refuses every environment while the instance settings
// disable environments (instance.ErrEnvironmentsDisabled), a host driver's
// while they allow managed sandboxes only (instance.ErrManagedSandboxOnly,
// the reason managed_sandbox_only; both also wrap drivers.ErrUnavailable),
// one whose driver declares less isolation for its config than the
// minimum in force (the highest of the instance's MinimumIsolation,
// container under managed-sandbox-only, and the environment's
// RequireIsolation: the reason isolation_below_minimum),
// and an environment that is archived, whose driver is not
// registered, is a test driver outside test mode or reports itself
// unavailable (drivers.Available), whose provider endpoint was last
// measured unavailable, whose stored config no longer validates, or whose
// effective capabilities lack one that is required. It reads the health
// store and never measures: it calls no provider (CAP-1). A gate is safe
// for concurrent use. berth.New builds one (envhook.NewGate) for the
// catalog, the assignments and the prober alike.
type gate struct {
	reg       *drivers.Registry
	health    HealthStore
	settings  instance.Reader
	testMode  bool
	testNames []string
	effective effectiveCache
}

// effectiveCache keeps the effective capabilities of saved environment
// revisions whose config validated, so that the gate does not normalize a
// revision's config again on every lease: a revision's record never
// changes (every update makes a new one) and the registry's drivers do not
// change while the gate runs. It starts over at maxEffective entries.
type effectiveCache struct {
	mu sync.Mutex
	m  map[effectiveKey]drivers.Set
}

type effectiveKey struct {
	env      string
	revision int64
	driver   string
}

const maxEffective = 1024

func (c *effectiveCache) get(env *Environment, d drivers.Driver) (drivers.Set, bool) {
	if env.ID == "" || env.Revision <= 0 {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	eff, ok := c.m[effectiveKey{env.ID, env.Revision, d.Name()}]
	return eff, ok
}

func (c *effectiveCache) put(env *Environment, d drivers.Driver, eff drivers.Set) {
	if env.ID == "" || env.Revision <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxEffective {
		c.m = make(map[effectiveKey]drivers.Set, 16)
	}
	c.m[effectiveKey{env.ID, env.Revision, d.Name()}] = eff
}

// newGate returns the gate over the drivers of reg. It reads TestMode,
// Health and Settings of opts (nil: defaults) and ignores the rest; the
// catalog and the assignments build theirs from the same options, so that
// the three agree. It panics if reg is nil.
func newGate(reg *drivers.Registry, opts *options) *gate {
	if reg == nil {
		panic("environment: a gate needs a driver registry")
	}
	var o options
	if opts != nil {
		o = *opts
	}
	if o.Health == nil {
		o.Health = newMemoryHealthStore()
	}
	return &gate{reg: reg, health: o.Health, settings: o.Settings, testMode: o.TestMode, testNames: append([]string{"fake"}, o.testDrivers...)}
}

// isTestDriver reports whether name is a test-only driver (CFG-4).
func (g *gate) isTestDriver(name string) bool { return slices.Contains(g.testNames, name) }

// check returns env's driver and effective capability set when env can be a
// working target and its effective set covers required, else an
// *Error naming env (see gate and Error). A failing health store or settings read is
// returned as it is, never taken as "available".
func (g *gate) check(ctx context.Context, env *Environment, required drivers.Set) (drivers.Driver, drivers.Set, error) {
	refuse := func(err error, format string, args ...any) (drivers.Driver, drivers.Set, error) {
		return nil, 0, &Error{unusable: true, Environment: labelOf(env), Reason: fmt.Sprintf(format, args...), Err: err}
	}
	set, err := g.instanceSettings(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("environment %s: %w", labelOf(env), err)
	}
	if !set.EnableEnvironments {
		aerr := set.Admit(env.Driver, false)
		return refuse(fmt.Errorf("%w: %w", aerr, drivers.ErrUnavailable), "%v", aerr)
	}
	if env.Status != StatusActive {
		return refuse(ErrArchived, "it is %s", env.Status)
	}
	d, reason, err := g.driverOf(env.Driver)
	if err != nil {
		return refuse(err, "%s", reason)
	}
	if aerr := set.Admit(d.Name(), d.Capabilities().Kind == drivers.KindHost); aerr != nil {
		return refuse(fmt.Errorf("%w: %w", aerr, drivers.ErrUnavailable), "%v", aerr)
	}
	if short, ierr := isolationRefusal(set, "Environment "+labelOf(env), d, env.Config, env.RequireIsolation); ierr != nil {
		return refuse(ierr, "%s", short)
	}
	h, measured, err := g.lastHealth(ctx, d, env.Config)
	if err != nil {
		return nil, 0, fmt.Errorf("environment %s: reading provider health: %w", labelOf(env), err)
	}
	if measured && !h.Available {
		return refuse(drivers.ErrUnavailable, "provider %s at %s was last measured unavailable at %s: %s",
			h.Driver, h.Endpoint, h.CheckedAt.UTC().Format(time.RFC3339), h.Reason)
	}
	eff, ok := g.effective.get(env, d)
	if !ok {
		norm, err := d.Schema().Normalize(env.Config)
		if err != nil {
			return refuse(&ConfigError{ID: env.ID, Name: env.Name, Err: err}, "the stored config no longer validates: %v", err)
		}
		eff = drivers.Effective(d, drivers.ConfigNarrowing(d, norm)) // CAP-2: the config may narrow (Docker over tcp://: no runner_ingress)
		g.effective.put(env, d, eff)
	}
	if missing := eff.Missing(required); len(missing) > 0 {
		names := make([]string, len(missing))
		for i, c := range missing {
			names[i] = c.String()
		}
		return nil, 0, &Error{unusable: true, Environment: labelOf(env), Missing: missing, Err: drivers.ErrUnsupported,
			Reason: fmt.Sprintf("driver %q lacks required capability %s (effective: %s) (CAP-4)", env.Driver, strings.Join(names, ", "), eff)}
	}
	return d, eff, nil
}

// driverStatus returns nil when the driver name can be used at all (it is
// registered, is not a test driver outside test mode, and does not report
// itself unavailable), else an error wrapping drivers.ErrUnavailable that
// says why. It reads nothing and calls no provider.
func (g *gate) driverStatus(name string) error {
	_, reason, err := g.driverOf(name)
	if err != nil {
		return fmt.Errorf("%s: %w", reason, drivers.ErrUnavailable)
	}
	return nil
}

// admit returns nil when the instance settings (CFG-9) let targets of
// driver d become working targets, else an error wrapping
// drivers.ErrUnavailable and instance.ErrEnvironmentsDisabled (d may be nil
// to ask only that) or instance.ErrManagedSandboxOnly (d is a host
// driver), or with the reason isolation_below_minimum when d declares for
// cfg less isolation than the settings' MinimumIsolation
// (isolationRefusal). It is the part of check that depends on no saved
// environment, for what has none (draft probes and draft leases). It reads the settings
// through options.Settings and calls no provider; a failing read is
// returned, never taken as "enabled".
func (g *gate) admit(ctx context.Context, d drivers.Driver, cfg config.Config) error {
	name := ""
	if d != nil {
		name = d.Name()
	}
	return g.admitTarget(ctx, "A draft of driver "+name, d, cfg, drivers.IsolationNone)
}

// admitTarget is admit for the target named target (its sentence's
// subject) that requires require as well (an environment's
// RequireIsolation).
func (g *gate) admitTarget(ctx context.Context, target string, d drivers.Driver, cfg config.Config, require drivers.Isolation) error {
	set, err := g.instanceSettings(ctx)
	if err != nil {
		return fmt.Errorf("environment: %w", err)
	}
	name, host := "", false
	if d != nil {
		name, host = d.Name(), d.Capabilities().Kind == drivers.KindHost
	}
	if err := set.Admit(name, host); err != nil {
		return fmt.Errorf("%w: %w", err, drivers.ErrUnavailable)
	}
	if d != nil {
		_, ierr := isolationRefusal(set, target, d, cfg, require)
		return ierr
	}
	return nil
}

// instanceSettings returns the settings in force (instance.Defaults
// without a Reader).
func (g *gate) instanceSettings(ctx context.Context) (instance.Settings, error) {
	if g.settings == nil {
		return instance.Defaults(), nil
	}
	return g.settings.Current(ctx)
}

func (g *gate) driverOf(name string) (drivers.Driver, string, error) {
	d, err := g.reg.Lookup(name)
	if err != nil {
		return nil, fmt.Sprintf("driver %q is not registered in this instance", name), err
	}
	if g.isTestDriver(name) && !g.testMode {
		return nil, fmt.Sprintf("driver %q is for tests only and test mode is off (CFG-4)", name), drivers.ErrUnavailable
	}
	if err := drivers.Available(d); err != nil {
		return nil, fmt.Sprintf("provider unavailable: %v", err), err
	}
	return d, "", nil
}

// lastHealth returns the last measured health of the provider endpoint cfg
// addresses, and false when it was never measured or d has no provider
// health.
func (g *gate) lastHealth(ctx context.Context, d drivers.Driver, cfg map[string]any) (ProviderHealth, bool, error) {
	hc, err := drivers.DriverAs[drivers.HealthChecker](d)
	if err != nil {
		return ProviderHealth{}, false, nil
	}
	ep := hc.Endpoint(config.Config(cfg))
	if ep == "" {
		return ProviderHealth{}, false, nil
	}
	h, err := g.health.GetProviderHealth(ctx, d.Name(), ep)
	if errors.Is(err, errcode.ErrNotFound) {
		return ProviderHealth{}, false, nil
	}
	if err != nil {
		return ProviderHealth{}, false, err
	}
	return h, true, nil
}

// healthView returns the health an environment's listing shows: nil when
// its driver has no provider health (or is not registered), else the last
// measurement or "not measured". It never measures.
func (g *gate) healthView(ctx context.Context, env *Environment) (*HealthView, error) {
	d, err := g.reg.Lookup(env.Driver)
	if err != nil {
		return nil, nil
	}
	hc, err := drivers.DriverAs[drivers.HealthChecker](d)
	if err != nil {
		return nil, nil
	}
	ep := hc.Endpoint(config.Config(env.Config))
	if ep == "" {
		return nil, nil
	}
	h, measured, err := g.lastHealth(ctx, d, env.Config)
	if err != nil {
		return nil, err
	}
	return healthView(ep, h, measured), nil
}
