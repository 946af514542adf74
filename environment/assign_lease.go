package environment

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// leaseTargetRequest names what a principal wants to lease
// (envhook.LeaseTarget): the environment bound to Scope (Scope not nil;
// Company "" or the scope's) or environment EnvironmentID leased for
// Company (Scope nil; Company required), and the capabilities the caller
// needs (CAP-4).
type leaseTargetRequest struct {
	EnvironmentID string
	Company       string
	Scope         *authz.Scope
	Required      drivers.Set
}

// leaseTarget is the target a principal may lease: the environment record
// (secret references only) and, for a scope, the resolution that chose it.
type leaseTarget struct {
	Company     string
	Environment *Environment
	// Resolution is the scope's resolution; nil when leased by id.
	Resolution *Resolution
}

func (a *Assignments) leaseTarget(ctx context.Context, p authz.Principal, req leaseTargetRequest) (*leaseTarget, error) {
	switch {
	case (req.EnvironmentID == "") == (req.Scope == nil):
		return nil, fmt.Errorf("environment: lease target: exactly one of an environment id and a scope is required: %w", errcode.ErrInvalid)
	case req.Scope != nil:
		return a.leaseScope(ctx, p, *req.Scope, req.Company, req.Required)
	}
	if req.Company == "" {
		return nil, fmt.Errorf("environment: lease of environment %s: field \"company\": required: %w", req.EnvironmentID, errcode.ErrInvalid)
	}
	// A refusal names only what the caller named: the id and its company.
	asked := authz.Resource{Kind: authz.ResourceKindEnvironment, ID: req.EnvironmentID, Company: req.Company}
	env, bs, err := a.targetByID(ctx, req.EnvironmentID)
	if err != nil {
		if aerr := a.authorize(ctx, p, authz.ActionLease, asked); aerr != nil {
			return nil, aerr
		}
		return nil, fmt.Errorf("environment: lease of environment %s: %w", req.EnvironmentID, err)
	}
	r := resourceOf(env)
	r.Company = req.Company
	if err := a.authorize(ctx, p, authz.ActionLease, r); err != nil {
		return nil, authz.Denied(p, authz.ActionLease, asked)
	}
	// The one gate (CAP-3, CAP-4): archived, driver, test mode, provider
	// health last measured, config, required capabilities.
	if _, _, err := a.gate.check(ctx, env, req.Required); err != nil {
		return nil, err
	}
	if err := a.boundElsewhere(ctx, env.ID, bs, req.Company, "environment "+env.ID); err != nil {
		return nil, err
	}
	return &leaseTarget{Company: req.Company, Environment: env}, nil
}

// targetByID reads environment id and, when the Store and the BindingStore
// are one targetReader, the bindings that point at it in the same read
// (bs nil means they were not read).
func (a *Assignments) targetByID(ctx context.Context, id string) (env *Environment, bs []*Binding, err error) {
	if a.targets != nil {
		env, bs, err = a.targets.GetEnvironmentBindings(ctx, id)
		if err == nil && bs == nil {
			bs = []*Binding{}
		}
		return env, bs, err
	}
	env, err = a.envs.GetEnvironment(ctx, id)
	return env, nil, err
}

func (a *Assignments) leaseScope(ctx context.Context, p authz.Principal, scope authz.Scope, company string, required drivers.Set) (*leaseTarget, error) {
	if scope.Company == "" {
		return nil, fmt.Errorf("environment: lease: scope field \"company\": required: %w", errcode.ErrInvalid)
	}
	if company != "" && company != scope.Company {
		return nil, fmt.Errorf("environment: lease for company %q through a scope of company %q: %w", company, scope.Company, errcode.ErrInvalid)
	}
	sc := scope
	// Authorize before resolving, so that a refusal names no environment.
	if err := a.authorize(ctx, p, authz.ActionLease, authz.Resource{Kind: authz.ResourceKindEnvironment, Company: scope.Company, Scope: &sc}); err != nil {
		return nil, err
	}
	res, bs, err := a.resolve(ctx, scope, required, true)
	if err != nil {
		return nil, err
	}
	r := resourceOf(res.Environment)
	r.Company, r.Scope = scope.Company, &sc
	if err := a.authorize(ctx, p, authz.ActionLease, r); err != nil {
		return nil, authz.Denied(p, authz.ActionLease, authz.Resource{Kind: authz.ResourceKindEnvironment, Company: scope.Company, Scope: &sc})
	}
	if err := a.boundElsewhere(ctx, res.Environment.ID, bs, scope.Company, "the environment of the "+res.Binding.String()); err != nil {
		return nil, err
	}
	return &leaseTarget{Company: scope.Company, Environment: res.Environment, Resolution: res}, nil
}

// boundElsewhere refuses a lease for company of environment envID when a
// company binding points at it and none is of company or the instance
// default. bs are its bindings when they were read with it (targetByID),
// else nil: then they are listed. label names the environment as the
// caller knows it.
func (a *Assignments) boundElsewhere(ctx context.Context, envID string, bs []*Binding, company, label string) error {
	if bs == nil {
		var err error
		if bs, err = a.bindings.ListBindings(ctx, BindingFilter{EnvironmentID: envID}); err != nil {
			return fmt.Errorf("environment: lease of %s: reading its bindings: %w", label, err)
		}
	}
	other := false
	for _, b := range bs {
		switch {
		case b.Kind == BindingInstanceDefault, b.Company == company:
			return nil
		case b.Company != "":
			other = true
		}
	}
	if other {
		return fmt.Errorf("environment: %s is bound to another company and cannot be leased for company %q (ASG-3): %w", label, company, errcode.ErrDenied)
	}
	return nil
}

// admitDraft authorizes p to lease a draft (an unsaved config) of driver
// for company, for the lease layer (lease.AcquireRequest.Draft): it asks
// the Authorizer for authz.ActionProbe on the draft (a draft lease is a
// draft probe's), then passes the part of the gate that needs no saved
// environment, the instance settings (CFG-9, gate.admit). A refusal wraps
// errcode.ErrDenied, or drivers.ErrUnavailable with
// instance.ErrEnvironmentsDisabled or instance.ErrManagedSandboxOnly (a
// host driver), or the reason isolation_below_minimum (cfg declares less
// isolation than the instance's minimumIsolation). A driver that is not registered passes here; the lease
// layer refuses it. It never calls a provider.
func (a *Assignments) admitDraft(ctx context.Context, p authz.Principal, driver, company string, cfg config.Config) error {
	if err := a.authorize(ctx, p, authz.ActionProbe, authz.Resource{Kind: authz.ResourceKindEnvironment, Driver: driver, Company: company}); err != nil {
		return err
	}
	d, _ := a.reg.Lookup(driver)
	if err := a.gate.admit(ctx, d, cfg); err != nil {
		return fmt.Errorf("environment: draft of driver %q: %w", driver, err)
	}
	return nil
}
