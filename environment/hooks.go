package environment

import (
	"context"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/envhook"
)

// The hooks only berth's own packages call (internal/envhook, CONVENTIONS 24).
func init() {
	envhook.WireCatalog = func(opts, keeper, reporters, protected any) {
		o := opts.(*Options)
		o.secretKeeper, _ = keeper.(*SecretKeeper)
		o.usageReporters, _ = reporters.([]UsageReporter)
		o.protected, _ = protected.(func(context.Context, *Environment) string)
	}
	envhook.CachedHealth = func(st any, maxStaleness time.Duration) any {
		return cachedHealthStore(st.(HealthStore), maxStaleness)
	}
	envhook.Draft = func(cat any, ctx context.Context, p authz.Principal, driver string, cfg map[string]any) (drivers.Driver, config.Config, error) {
		return cat.(*Catalog).draft(ctx, p, CreateRequest{Name: "draft", Driver: driver, Config: cfg})
	}
	envhook.Scrubber = func(cat any, ctx context.Context, p authz.Principal, id string) (func(string) string, error) {
		return cat.(*Catalog).scrubber(ctx, p, id)
	}
	envhook.Check = func(gate any, ctx context.Context, env any, required drivers.Set) (drivers.Driver, drivers.Set, error) {
		return gate.(*Gate).check(ctx, env.(*Environment), required)
	}
}
