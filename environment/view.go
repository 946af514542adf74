package environment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
)

// View is what a read returns. The full view (Redacted false) holds the
// config with secret fields as config.SecretRef values (never a secret
// value; redacted by the driver's schema), env vars and metadata. The
// redacted view (Redacted true), shown to board members and agents, leaves
// out config, env vars and metadata (CFG-2). Neither ever holds a secret
// value, so a View may be logged or rendered as JSON.
//
// The record's fields are those of the embedded Environment, defined once
// there; in JSON they sit at the top level beside the view's own fields,
// exactly as Environment marshals them. The embedded Environment is a copy
// (its Config redacted, or nil in the redacted view): changing it changes
// nothing stored.
type View struct {
	Environment
	// Redacted reports the redacted view.
	Redacted bool `json:"redacted,omitempty"`
	// Unavailable, if not empty, says why the environment cannot be used as
	// a target now (driver not registered, test driver outside test mode,
	// environments disabled or managed-sandbox-only for a host driver by
	// the instance settings (CFG-9), an isolation below the minimum in
	// force (instance.Settings.Minimum or RequireIsolation: the refusal's
	// sentence, isolation_below_minimum), provider last measured
	// unavailable; CAP-3). Reading it calls no provider.
	Unavailable string `json:"unavailable,omitempty"`
	// Health is the provider health last measured for the endpoint the
	// config addresses, with its time, or "not measured" (CAP-1, CAP-3);
	// nil for drivers without provider health (host targets).
	Health *HealthView `json:"health,omitempty"`
	// Isolation is the level the environment's driver declares for its
	// config (drivers.IsolationOf), without I/O; "none" when the driver
	// is not registered.
	Isolation drivers.Isolation `json:"isolation"`
}

// withHealth adds the provider health last measured to v: a store read,
// never a measurement (CAP-1).
func (c *Catalog) withHealth(ctx context.Context, v *View, env *Environment) (*View, error) {
	if d, err := c.reg.Lookup(env.Driver); err == nil && v.Unavailable == "" {
		// CFG-9: the instance settings' refusal (a cached read); the
		// record itself stays readable.
		// A target below the minimum in force (issue 56) is marked with
		// the refusal's sentence: its level, the minimum and the setting.
		aerr := c.gate.admitTarget(ctx, "Environment "+labelOf(env), d, env.Config, env.RequireIsolation)
		switch {
		case errors.Is(aerr, instance.ErrEnvironmentsDisabled), errors.Is(aerr, instance.ErrManagedSandboxOnly),
			errcode.ReasonOf(aerr) == reasonIsolationBelowMinimum:
			v.Unavailable = aerr.Error()
		case aerr != nil:
			return nil, fmt.Errorf("environment %s: %w", labelOf(env), aerr)
		}
	}
	h, err := c.gate.healthView(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("environment %s: reading provider health: %w", labelOf(env), err)
	}
	v.Health = h
	if h != nil && h.Status == HealthUnavailable && v.Unavailable == "" {
		v.Unavailable = fmt.Sprintf("provider %s at %s last measured unavailable at %s: %s",
			env.Driver, h.Endpoint, h.CheckedAt.UTC().Format(time.RFC3339), h.Reason)
	}
	return v, nil
}

// String returns `environment "NAME" (ID) driver D, STATUS, revision N`.
func (v *View) String() string {
	return fmt.Sprintf("environment %q (%s) driver %s, %s, revision %d", v.Name, v.ID, v.Driver, v.Status, v.Revision)
}

// view builds the view of env. full selects the full view. When the driver
// is not registered the config cannot be redacted by its schema and is left
// out even of the full view.
func (c *Catalog) view(env *Environment, full bool) *View {
	v := &View{
		Environment: Environment{
			ID: env.ID, Name: env.Name, Description: env.Description, Driver: env.Driver,
			Status: env.Status, Revision: env.Revision, CreatedAt: env.CreatedAt, UpdatedAt: env.UpdatedAt,
			CreatedBy: env.CreatedBy, UpdatedBy: env.UpdatedBy,
			Pool: clonePool(env.Pool), RequireIsolation: env.RequireIsolation,
		},
		Redacted: !full,
	}
	if err := c.gate.driverStatus(env.Driver); err != nil {
		v.Unavailable = err.Error()
	}
	d, _ := c.reg.Lookup(env.Driver)
	if d != nil {
		v.Isolation = drivers.IsolationOf(d, env.Config)
	}
	if env.ActiveTemplate != nil {
		// IMG-6: the drift, computed from the config without I/O; the
		// source fingerprint stays out of the JSON form.
		t := *env.ActiveTemplate
		t.Drift = env.drift(d)
		v.ActiveTemplate = &t
	}
	if !full {
		return v
	}
	if d != nil {
		// Normalizing gives the same typed view whether the store kept Go
		// values or their JSON form; a config that no longer validates is
		// shown as stored. Either way the schema redacts it.
		schema := d.Schema()
		cfg, err := schema.Normalize(env.Config)
		if err != nil {
			cfg = config.Config(env.Config)
		}
		v.Config = schema.Redact(cfg)
	}
	v.Env = redactEnv(env.Env)
	v.Metadata = maps.Clone(env.Metadata)
	return v
}

// redactEnv copies env, replacing the value of every name that looks like
// a credential with config.Redacted (defence in depth: the catalog refuses
// such names, but a store may have been written by other means).
func redactEnv(env map[string]string) map[string]string {
	out := maps.Clone(env)
	for k := range out {
		if looksLikeSecretName(k) {
			out[k] = config.Redacted
		}
	}
	return out
}
