package probe

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/qualification"
)

// ProbeDraft probes an unsaved config of driver (PRB-4): the catalog
// validates it as Create would, without saving anything or touching the
// secret store (which needs ActionProbe), and the
// probe then checks reachability on a fresh ephemeral draft lease
// (internal/leasehook.Draft): it runs the detection script, reads the live
// image (sandbox drivers) and destroys what it acquired. Like every lease,
// the draft lease has a write-ahead record (LEASE-2), so no sandbox exists
// that no record points at; the record keeps the config without its secret
// fields, and the lease manager removes it once the cleanup is proven
// (Cleanup.RecordRemoved): a draft probe leaves nothing behind. Only an
// unproven cleanup leaves a pending_cleanup record (no secret) for a sweep,
// and Cleanup says so. Nothing else is saved, and a qualification is never
// recorded: the diagnostic is always "not_saved".
//
// It returns an error only when the principal is denied (wrapping
// errcode.ErrDenied), driver is empty (errcode.ErrInvalid) or the instance settings
// disable environments (instance.ErrEnvironmentsDisabled, CFG-9); an
// invalid config, an unregistered driver or a host driver under
// managed-sandbox-only ("managed_sandbox_only") is a Result with
// OK false.
//
// Of req, a draft probe uses Progress; Company, Workspace and Runner are
// for saved environments and ignored.
func (p *Prober) ProbeDraft(ctx context.Context, pr authz.Principal, driver string, rawConfig map[string]any, req Request) (*Result, error) {
	if err := p.authorize(ctx, pr, authz.ActionProbe, authz.Resource{Kind: authz.ResourceKindEnvironment, Driver: driver}); err != nil {
		return nil, err
	}
	if driver == "" {
		return nil, fmt.Errorf("probe: a draft probe needs a driver name: %w", errcode.ErrInvalid)
	}
	// CFG-9: with environments disabled nothing is probed or measured.
	if err := envhook.Admit(p.gate, ctx, nil, nil); err != nil {
		return nil, fmt.Errorf("probe: draft of driver %q: %w", driver, err)
	}
	r := p.newRun(driver, req.Progress)
	r.draft = true
	r.res.Target = "provider " + driver
	if d, err := p.reg.Lookup(driver); err == nil {
		// Scrub the pasted secrets, whatever the validation says of them.
		cfg := config.Config{}
		for k, v := range rawConfig {
			cfg[k] = v
		}
		r.scrub = secretValues(d.Schema(), cfg)
		// Name the target from what was pasted, so that a config that
		// fails validation is still reported by host (user@host:port).
		r.res.Target = targetOf(d, withDefaults(d.Schema(), cfg))
	}

	var (
		drv    drivers.Driver
		cfg    config.Config
		denied error
	)
	r.stage(ctx, stageResolve, func(ctx context.Context) (string, string, error) {
		d, c, err := envhook.Draft(p.cat, ctx, pr, driver, rawConfig)
		if errors.Is(err, errcode.ErrDenied) {
			denied = err
			return "", "", err
		}
		if err != nil {
			return "", "", err
		}
		drv, cfg = d, c
		r.res.Target = targetOf(d, c)
		// CFG-9, CAP-3: a host driver under managed-sandbox-only.
		if err := envhook.Admit(p.gate, ctx, d, c); err != nil {
			return "", "", err
		}
		if err := drivers.Available(d); err != nil {
			return "", "", err
		}
		// CAP-3: measure the provider; a draft stores nothing, so the
		// measurement is not kept.
		if hc, herr := drivers.DriverAs[drivers.HealthChecker](d); herr == nil {
			if err := hc.CheckHealth(ctx, c); err != nil {
				return "", "", err
			}
		}
		return "config valid; nothing saved", "", nil
	})
	if denied != nil {
		return nil, denied
	}
	env := &environment.Environment{ID: "draft", Name: "draft", Driver: driver,
		Status: environment.StatusActive, Config: cfg}
	p.probeSaved(ctx, pr, r, env, drv, Request{}, true)
	clear(cfg)
	diag := qualification.Diagnostic{Code: qualify.NotSaved,
		Message: "a draft probe never records a qualification; save the environment and probe it"}
	r.res.QualificationDiagnostic = &diag
	if r.res.Hostname != "" && drv != nil && drv.Capabilities().Kind == drivers.KindHost && r.res.Target == "host "+drv.Name() {
		r.res.Target = "host " + r.res.Hostname
	}
	r.res.Summary = summarize(r, drv)
	return r.finish(ctx), nil
}

// withDefaults returns cfg with the schema's defaults filled in for absent
// fields; the values are not validated (it only serves naming the target).
func withDefaults(schema *config.Schema, cfg config.Config) config.Config {
	out := maps.Clone(cfg)
	for _, f := range schema.Fields {
		if _, ok := out[f.Name]; !ok && f.Default != nil {
			out[f.Name] = f.Default
		}
	}
	return out
}
