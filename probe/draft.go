package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// LabelDraftProbe is the provider label put on a draft probe's sandbox
// (value "true"), next to lease.LabelInstance.
const LabelDraftProbe = "berth.draft-probe"

// ProbeDraft probes an unsaved config of driver (PRB-4): the catalog
// validates it as Create would, without saving anything or touching the
// secret store (environment.Catalog.Draft, which needs ActionProbe), and the
// probe then checks reachability by acquiring from the driver directly,
// running the detection script, reading the live image (sandbox drivers)
// and destroying what it acquired. No lease record is written, nothing is
// saved, and a qualification is never recorded: the diagnostic is always
// qualification.CodeNotSaved.
//
// A sandbox driver's draft probe creates a real sandbox, labelled with
// lease.LabelInstance (the lease Manager's InstanceID) and LabelDraftProbe. If its
// destroy cannot be confirmed (also after drivers.Destroyer, where the
// driver has it) the result says so with Cleanup.PendingCleanup, and the
// sandbox is left to the provider-side orphan sweep.
//
// It returns an error only when the principal is denied (wrapping
// environment.ErrDenied) or driver is empty (ErrInvalid); an invalid config
// or an unregistered driver is a Result with OK false.
func (p *Prober) ProbeDraft(ctx context.Context, pr environment.Principal, driver string, rawConfig map[string]any) (*Result, error) {
	if err := p.authorize(ctx, pr, environment.ActionProbe, environment.Resource{Kind: environment.ResourceKindEnvironment, Driver: driver}); err != nil {
		return nil, err
	}
	if driver == "" {
		return nil, fmt.Errorf("probe: a draft probe needs a driver name: %w", ErrInvalid)
	}
	r := p.newRun(driver)
	r.res.Draft = true
	r.res.Target = "provider " + driver
	if d, err := p.reg.Lookup(driver); err == nil {
		// Scrub the pasted secrets, whatever the validation says of them.
		cfg := drivers.Config{}
		for k, v := range rawConfig {
			cfg[k] = v
		}
		r.scrub = secretValues(d.Schema(), cfg)
	}

	var (
		drv    drivers.Driver
		cfg    drivers.Config
		denied error
	)
	r.stage(StageResolve, func() (string, drivers.Code, error) {
		d, c, err := p.cat.Draft(ctx, pr, environment.CreateRequest{Name: "draft", Driver: driver, Config: rawConfig})
		if errors.Is(err, environment.ErrDenied) {
			denied = err
			return "", "", err
		}
		if err != nil {
			return "", "", err
		}
		drv, cfg = d, c
		r.res.Target = targetOf(d, c)
		if err := drivers.Available(d); err != nil {
			return "", "", err
		}
		return "config valid; nothing saved", "", nil
	})
	if denied != nil {
		return nil, denied
	}
	if r.res.OK {
		p.probeDraft(ctx, r, drv, cfg)
	}
	clear(cfg)
	diag := qualification.Diagnostic{Code: qualification.CodeNotSaved,
		Message: "a draft probe never records a qualification; save the environment and probe it"}
	r.res.QualificationDiagnostic = &diag
	if r.res.Hostname != "" && drv != nil && drv.Capabilities().Kind == drivers.KindHost && r.res.Target == "host "+drv.Name() {
		r.res.Target = "host " + r.res.Hostname
	}
	r.res.Summary = summarize(r, drv)
	return r.finish(ctx), nil
}

// probeDraft acquires from the driver directly (there is no saved
// environment to hold a lease record), measures, and destroys.
func (p *Prober) probeDraft(ctx context.Context, r *run, drv drivers.Driver, cfg drivers.Config) {
	var sb drivers.Sandbox
	ok := r.stage(StageAcquire, func() (string, drivers.Code, error) {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if _, has := ctx.Deadline(); !has {
			budget := drv.Capabilities().StartupBudget
			if budget <= 0 {
				budget = p.o.DraftBudget
			}
			actx, cancel = context.WithTimeout(ctx, budget)
		}
		defer cancel()
		var err error
		sb, err = drv.Acquire(actx, cfg, drivers.AcquireRequest{
			LeaseID: "draft-probe-" + randomHex(6),
			Labels:  map[string]string{lease.LabelInstance: p.leases.InstanceID(), LabelDraftProbe: "true"},
		})
		if err != nil {
			return "", "", err
		}
		return "acquired " + sb.ID(), "", nil
	})
	if sb == nil {
		return
	}
	if ok {
		p.measure(ctx, r, drv, sb)
	}
	r.stage(StageRelease, func() (string, drivers.Code, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.o.CleanupTimeout)
		defer cancel()
		id := sb.ID()
		rc, err := sb.Release(rctx, drivers.Destroy)
		proven := err == nil && rc.Proves(id, drivers.Destroy)
		if !proven {
			if ds, derr := drivers.AsDestroyer(drv); derr == nil {
				rc2, err2 := ds.Destroy(rctx, cfg, id)
				if err2 == nil && rc2.Proves(id, drivers.Destroy) {
					rc, err, proven = rc2, nil, true
				}
			}
		}
		c := &Cleanup{Confirmed: proven, PendingCleanup: !proven, Evidence: r.scrub.scrub(rc.Evidence)}
		r.res.Cleanup = c
		if !proven {
			if err == nil {
				err = fmt.Errorf("the provider did not confirm that sandbox %s was destroyed (state %q)", id, rc.State)
			}
			if c.Evidence == "" {
				c.Evidence = r.scrub.scrub(err.Error())
			}
			return "", drivers.CodeCleanupFailed, err
		}
		return "destroy confirmed: " + c.Evidence, "", nil
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
