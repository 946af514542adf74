package environment

import (
	"context"
	"log/slog"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/envhook"
)

// The hooks only berth's own packages call (internal/envhook, CONVENTIONS 24).
func init() {
	envhook.NewAssignments = func(bindings, envs any, reg *drivers.Registry, o *envhook.Options) any {
		b, _ := bindings.(BindingStore)
		s, _ := envs.(Store)
		return newAssignments(b, s, reg, optionsOf(o))
	}
	envhook.NewCatalog = func(envs any, reg *drivers.Registry, secrets, asg any, o *envhook.Options) any {
		s, _ := envs.(Store)
		sec, _ := secrets.(SecretStore)
		a, _ := asg.(*Assignments)
		return newCatalog(s, reg, sec, a, optionsOf(o))
	}
	envhook.NewGate = func(reg *drivers.Registry, o *envhook.Options) any {
		return newGate(reg, optionsOf(o))
	}
	envhook.NewSecretKeeper = func(uses, secrets any, log *slog.Logger) envhook.SecretKeeper {
		return newSecretKeeper(uses.(SecretUseStore), secrets.(SecretStore), log)
	}
	envhook.NewMemoryStore = func() any { return newMemoryStore() }
	envhook.NewMemoryBindingStore = func() any { return newMemoryBindingStore() }
	envhook.NewMemoryHealthStore = func() any { return newMemoryHealthStore() }
	envhook.NewMemorySecretUseStore = func() any { return newMemorySecretUseStore() }
	envhook.NewMemorySecretStore = func() any { return newMemorySecretStore() }
	envhook.CachedHealth = func(st any, maxStaleness time.Duration) any {
		return cachedHealthStore(st.(HealthStore), maxStaleness)
	}
	envhook.Authorize = func(asg any, ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
		return asg.(*Assignments).authorize(ctx, p, a, r)
	}
	envhook.LeaseTarget = func(asg any, ctx context.Context, p authz.Principal, scope *authz.Scope, envID, company string, required drivers.Set) (any, string, error) {
		t, err := asg.(*Assignments).leaseTarget(ctx, p, leaseTargetRequest{EnvironmentID: envID, Company: company, Scope: scope, Required: required})
		if err != nil {
			return nil, "", err
		}
		return t.Environment, t.Company, nil
	}
	envhook.AdmitDraft = func(asg any, ctx context.Context, p authz.Principal, driver, company string, cfg map[string]any) error {
		return asg.(*Assignments).admitDraft(ctx, p, driver, company, cfg)
	}
	envhook.Draft = func(cat any, ctx context.Context, p authz.Principal, driver string, cfg map[string]any) (drivers.Driver, config.Config, error) {
		return cat.(*Catalog).draft(ctx, p, CreateRequest{Name: "draft", Driver: driver, Config: cfg})
	}
	envhook.Scrubber = func(cat any, ctx context.Context, p authz.Principal, id string) (func(string) string, error) {
		return cat.(*Catalog).scrubber(ctx, p, id)
	}
	envhook.Check = func(g any, ctx context.Context, env any, required drivers.Set) (drivers.Driver, drivers.Set, error) {
		return g.(*gate).check(ctx, env.(*Environment), required)
	}
	envhook.Admit = func(g any, ctx context.Context, d drivers.Driver, cfg map[string]any) error {
		return g.(*gate).admit(ctx, d, cfg)
	}
	envhook.AdmitEnvironment = func(g any, ctx context.Context, d drivers.Driver, env any) error {
		e := env.(*Environment)
		return g.(*gate).admitTarget(ctx, "Environment "+labelOf(e), d, e.Config, e.RequireIsolation)
	}
	envhook.SourceFingerprint = func(env any, d drivers.Driver) string {
		return env.(*Environment).sourceFingerprint(d)
	}
	envhook.AppliedTemplate = func(env any, d drivers.Driver) any {
		if t := env.(*Environment).appliedTemplate(d); t != nil {
			return t
		}
		return nil
	}
}

// optionsOf converts the hooks' Options (nil: defaults).
func optionsOf(o *envhook.Options) *options {
	if o == nil {
		return nil
	}
	out := &options{TestMode: o.TestMode, Authorizer: o.Authorizer, Logger: o.Logger, Settings: o.Settings, secretKeeper: o.Keeper}
	out.Health, _ = o.Health.(HealthStore)
	for _, r := range o.Reporters {
		out.usageReporters = append(out.usageReporters, r.(usageReporter))
	}
	out.protected, _ = o.Protected.(func(context.Context, *Environment) string)
	return out
}
