package environment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/secretcfg"
)

// defaultHealthTimeout bounds one provider health measurement when
// options.healthTimeout is zero.
const defaultHealthTimeout = 10 * time.Second

// RefreshHealth measures now the health of the provider endpoint that
// environment id addresses, stores the result (replacing the last one, so a
// success clears a failure) and returns it (CAP-3): an operator's explicit
// refresh, and what a probe does before it gates. It needs ActionProbe
// (instance admins and local operators, PRB-7). It returns nil and no error
// when the driver has no provider health (host targets). A failed
// measurement is a result (Status unavailable, with the code and reason),
// not an error; errors are authorization, not-found, an unresolvable config
// and store failures. The measurement is bounded by 10 seconds and ctx,
// and allocates nothing at the provider.
func (c *Catalog) RefreshHealth(ctx context.Context, p authz.Principal, id string) (*HealthView, error) {
	env, err := c.load(ctx, p, authz.ActionProbe, id)
	if err != nil {
		return nil, err
	}
	d, err := c.reg.Lookup(env.Driver)
	if err != nil {
		return nil, fmt.Errorf("environment %s: %w", labelOf(env), err)
	}
	hc, err := drivers.DriverAs[drivers.HealthChecker](d)
	if err != nil {
		return nil, nil
	}
	h, err := c.measure(ctx, env, d, hc)
	if err != nil {
		return nil, err
	}
	return healthView(h.Endpoint, h, true), nil
}

// RefreshAllHealth measures, once each, every provider endpoint that an
// active saved environment addresses, and stores the results (CAP-3). It is
// the host's background action (see berth's System.RunHealthChecks),
// taken for p, who needs ActionProbe on the catalog (a Resource of kind
// environment without an id: instance admins and local operators under
// DefaultPolicy; a refusal wraps errcode.ErrDenied and measures nothing): it
// returns nothing but errors and changes no environment. A failed measurement is stored as unavailable; the returned
// error joins the failures to resolve a config or to store a result, and
// the context's error when it ends the round early.
func (c *Catalog) RefreshAllHealth(ctx context.Context, p authz.Principal) error {
	if err := c.authorize(ctx, p, authz.ActionProbe, authz.Resource{Kind: authz.ResourceKindEnvironment}); err != nil {
		return err
	}
	envs, err := c.store.ListEnvironments(ctx, ListFilter{Status: StatusActive})
	if err != nil {
		return fmt.Errorf("environment: health refresh: %w", err)
	}
	seen := map[[2]string]bool{}
	var errs []error
	for _, env := range envs {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		d, err := c.reg.Lookup(env.Driver)
		if err != nil {
			continue
		}
		hc, err := drivers.DriverAs[drivers.HealthChecker](d)
		if err != nil {
			continue
		}
		key := [2]string{d.Name(), hc.Endpoint(config.Config(env.Config))}
		if key[1] == "" || seen[key] {
			continue
		}
		seen[key] = true
		if _, err := c.measure(ctx, env, d, hc); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// measure pings the provider endpoint of env and stores the result.
func (c *Catalog) measure(ctx context.Context, env *Environment, d drivers.Driver, hc drivers.HealthChecker) (ProviderHealth, error) {
	ep := hc.Endpoint(config.Config(env.Config))
	if ep == "" {
		return ProviderHealth{}, fmt.Errorf("environment %s: the config names no provider endpoint: %w", labelOf(env), errcode.ErrInvalid)
	}
	_, cfg, err := c.resolvedConfig(ctx, env.ID)
	if err != nil {
		return ProviderHealth{}, fmt.Errorf("environment %s: health check: %w", labelOf(env), err)
	}
	secrets := secretStrings(d.Schema(), cfg)
	mctx, cancel := context.WithTimeout(ctx, c.healthTTL)
	perr := hc.CheckHealth(mctx, cfg)
	cancel()
	clear(cfg)
	if perr != nil && ctx.Err() != nil {
		// The caller gave up; that says nothing of the provider.
		return ProviderHealth{}, ctx.Err()
	}
	h := ProviderHealth{Driver: d.Name(), Endpoint: ep, Available: perr == nil, CheckedAt: c.clock.Now().UTC()}
	if perr != nil {
		h.Code, h.Reason = reason.Of(perr), scrub(perr.Error(), secrets)
		if errors.Is(perr, context.DeadlineExceeded) {
			h.Code = reason.ProviderUnavailable
			h.Reason = fmt.Sprintf("no answer within %s: %s", c.healthTTL, h.Reason)
		}
	}
	if err := c.health.PutProviderHealth(ctx, h); err != nil {
		return ProviderHealth{}, fmt.Errorf("environment %s: storing provider health: %w", labelOf(env), err)
	}
	c.log.LogAttrs(ctx, slog.LevelInfo, "provider health measured", slog.String("driver", h.Driver),
		slog.String("endpoint", h.Endpoint), slog.Bool("available", h.Available), slog.String("code", string(h.Code)))
	return h, nil
}

// secretStrings returns the plain values of cfg's secrets (Secret fields
// and SecretMap values) long enough to scrub.
func secretStrings(schema *config.Schema, cfg config.Config) []string {
	var out []string
	for _, v := range secretcfg.SecretValues(schema, cfg) {
		if len(v) >= 4 {
			out = append(out, v)
		}
	}
	return out
}

// scrub replaces every secret value in text, a second line of defence
// behind the drivers' own guarantee.
func scrub(text string, secrets []string) string {
	for _, v := range secrets {
		text = strings.ReplaceAll(text, v, config.Redacted)
	}
	return text
}
