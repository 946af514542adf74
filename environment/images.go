package environment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// ImagesRequest asks Catalog.ListImages whose provider to ask. The zero
// value asks nothing and is refused.
type ImagesRequest struct {
	// Environment is a saved environment: its config, credentials
	// included, asks the provider. Driver and Config are then unused.
	Environment string
	// Driver and Config are an unsaved config (a create form's), its
	// secret fields holding pasted values, used when Environment is "".
	Driver string
	Config map[string]any
	// Match keeps the images whose name contains it, case-insensitively;
	// "" keeps all.
	Match string
}

// ListImages lists the images the provider of a config keeps, each by
// name with the value the driver's ImageField takes (Daytona's snapshots
// and their ids), for an operator to pick from (drivers.ImageLister): an
// explicit action, never part of a listing, that allocates nothing. It
// needs ActionProbe (it reaches the provider with the config's
// credentials, as a probe does): on the saved environment, or for an
// unsaved config on its driver, which is validated as a draft probe's is
// (a config that points at a stored secret is refused: name the saved
// environment instead). A driver that lists no images is refused with an
// error wrapping drivers.ErrUnsupported. The provider is asked within 10
// seconds and ctx; a failure names the environment or driver and never
// holds a secret value.
func (c *Catalog) ListImages(ctx context.Context, p authz.Principal, req ImagesRequest) ([]drivers.ImageChoice, error) {
	var (
		d     drivers.Driver
		cfg   config.Config
		label string
	)
	switch {
	case req.Environment != "":
		env, err := c.load(ctx, p, authz.ActionProbe, req.Environment)
		if err != nil {
			return nil, err
		}
		label = "environment " + labelOf(env)
		if d, err = c.reg.Lookup(env.Driver); err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		if _, err := drivers.DriverAs[drivers.ImageLister](d); err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		if _, cfg, err = c.resolvedConfig(ctx, env.ID); err != nil {
			return nil, err
		}
	case req.Driver != "":
		var err error
		label = "driver " + req.Driver
		if d, cfg, err = c.draftForImages(ctx, p, req.Driver, req.Config); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("environment: list images: name a saved environment or a driver and its config: %w", errcode.ErrInvalid)
	}
	defer clear(cfg)
	l, err := drivers.DriverAs[drivers.ImageLister](d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	if err := drivers.Available(d); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	secrets := secretStrings(d.Schema(), cfg)
	lctx, cancel := context.WithTimeout(ctx, c.healthTTL)
	defer cancel()
	out, err := l.ListImages(lctx, cfg, req.Match)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w: %w", c.healthTTL, err, drivers.ErrUnavailable)
		}
		return nil, fmt.Errorf("%s: listing the provider's images: %w", label, scrubErr(err, secrets))
	}
	return out, nil
}

// draftForImages validates an unsaved config for ListImages as draft does,
// except that the schema's image field may be left empty or hold what the
// operator is still typing (it is what the list helps to fill): that
// field's requirement and check, and the schema's cross-field check, are
// left out.
func (c *Catalog) draftForImages(ctx context.Context, p authz.Principal, driver string, raw map[string]any) (drivers.Driver, config.Config, error) {
	if err := c.authorize(ctx, p, authz.ActionProbe, authz.Resource{Kind: authz.ResourceKindEnvironment, Driver: driver}); err != nil {
		return nil, nil, err
	}
	label := fmt.Sprintf("%q", "draft")
	schema, err := c.schemaFor(label, driver)
	if err != nil {
		return nil, nil, err
	}
	if err := checkReservedConfig(label, schema, raw); err != nil {
		return nil, nil, err
	}
	relaxed := *schema
	relaxed.Check = nil
	relaxed.Fields = slices.Clone(schema.Fields)
	for i, f := range relaxed.Fields {
		if f.Name == schema.ImageField {
			relaxed.Fields[i].Required, relaxed.Fields[i].Check = false, nil
		}
	}
	in := maps.Clone(raw)
	if schema.ImageField != "" {
		delete(in, schema.ImageField)
	}
	cfg, err := relaxed.Normalize(in)
	if err != nil {
		return nil, nil, &ConfigError{Name: "draft", Err: err}
	}
	if field := storedSecretField(schema, cfg); field != "" {
		return nil, nil, &Error{Environment: label, Field: field, Err: errcode.ErrInvalid,
			Reason: "a draft cannot point at a stored secret; paste the value or name the saved environment"}
	}
	d, err := c.reg.Lookup(driver)
	if err != nil {
		return nil, nil, err
	}
	return d, cfg, nil
}

// scrubbedError is an error whose text has the secret values replaced;
// errors.Is and errors.As still see the error it wraps.
type scrubbedError struct {
	err  error
	text string
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrubErr returns err with the secrets replaced in its text.
func scrubErr(err error, secrets []string) error {
	if t := scrub(err.Error(), secrets); t != err.Error() {
		return &scrubbedError{err: err, text: t}
	}
	return err
}
