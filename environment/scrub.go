package environment

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/authz"
)

// scrubber returns a function that replaces, in a text, every secret value
// that environment id's config holds (secret fields and secret-map values)
// with config.Redacted: a second line of defence, behind the drivers' own
// guarantee, for texts built from provider answers (probe results, health
// reasons). It needs ActionProbe (instance admins and local operators under
// DefaultPolicy). The values stay inside the function: nothing returns them,
// and the function holds them only as long as the caller keeps it. Errors:
// authorization, errcode.ErrNotFound, and a config whose secrets cannot be resolved
// (wrapping the SecretStore's error); none holds a secret value.
func (c *Catalog) scrubber(ctx context.Context, p authz.Principal, id string) (func(string) string, error) {
	if _, err := c.load(ctx, p, authz.ActionProbe, id); err != nil {
		return nil, err
	}
	env, cfg, err := c.resolvedConfig(ctx, id)
	if err != nil {
		return nil, err
	}
	d, err := c.reg.Lookup(env.Driver)
	if err != nil {
		return nil, fmt.Errorf("environment %s: %w", labelOf(env), err)
	}
	values := secretStrings(d.Schema(), cfg)
	clear(cfg)
	return func(text string) string { return scrub(text, values) }, nil
}
