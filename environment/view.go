package environment

import (
	"fmt"
	"maps"
	"time"

	"github.com/berthdev/berth/drivers"
)

// View is what a read returns. The full view (Redacted false) holds the
// config with secret fields as drivers.SecretRef values (never a secret
// value; redacted by the driver's schema), env vars and metadata. The
// redacted view (Redacted true), shown to board members and agents, leaves
// out config, env vars and metadata (CFG-2). Neither ever holds a secret
// value, so a View may be logged or rendered as JSON.
type View struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Driver      string            `json:"driver"`
	Status      Status            `json:"status"`
	Config      drivers.Config    `json:"config,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Revision    int64             `json:"revision"`
	CreatedAt   time.Time         `json:"createdAt"`
	UpdatedAt   time.Time         `json:"updatedAt"`
	CreatedBy   string            `json:"createdBy,omitempty"`
	UpdatedBy   string            `json:"updatedBy,omitempty"`
	// Redacted reports the redacted view.
	Redacted bool `json:"redacted,omitempty"`
	// Unavailable, if not empty, says why the environment cannot be used as
	// a target now (driver not registered, test driver outside test mode,
	// provider unavailable; CAP-3). Reading it does no I/O.
	Unavailable string `json:"unavailable,omitempty"`
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
		ID: env.ID, Name: env.Name, Description: env.Description, Driver: env.Driver,
		Status: env.Status, Revision: env.Revision, CreatedAt: env.CreatedAt, UpdatedAt: env.UpdatedAt,
		CreatedBy: env.CreatedBy, UpdatedBy: env.UpdatedBy, Redacted: !full,
	}
	d, err := c.reg.Lookup(env.Driver)
	switch {
	case err != nil:
		v.Unavailable = err.Error()
	case c.isTestDriver(env.Driver) && !c.testMode:
		v.Unavailable = fmt.Sprintf("driver %q is for tests only and test mode is off", env.Driver)
	default:
		if aerr := drivers.Available(d); aerr != nil {
			v.Unavailable = aerr.Error()
		}
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
			cfg = drivers.Config(env.Config)
		}
		v.Config = schema.Redact(cfg)
	}
	v.Env = redactEnv(env.Env)
	v.Metadata = maps.Clone(env.Metadata)
	return v
}

// redactEnv copies env, replacing the value of every name that looks like
// a credential with drivers.Redacted (defence in depth: the catalog refuses
// such names, but a store may have been written by other means).
func redactEnv(env map[string]string) map[string]string {
	out := maps.Clone(env)
	for k := range out {
		if LooksLikeSecretName(k) {
			out[k] = drivers.Redacted
		}
	}
	return out
}
