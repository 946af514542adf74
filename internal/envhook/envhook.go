// Package envhook carries the environment package's hooks that only
// berth's own packages call (CONVENTIONS 24): what berth.New wires into a
// catalog, the health cache it shares, and the probe's draft validation,
// scrubber and availability check. No host or driver author needs them:
// a host reaches the same behaviour through berth.New, System.Prober and
// the catalog's entry points.
//
// Package environment sets every variable in its init, so they are never
// nil in a program that imports environment. The arguments typed any are
// environment's own types (this package sits below environment and cannot
// name them); each variable says which, and a wrong type panics.
package envhook

import (
	"context"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

var (
	// WireCatalog sets on opts (an *environment.Options, before
	// environment.NewCatalog) the hooks of the catalog only berth.New
	// wires: keeper (an *environment.SecretKeeper, or nil) keeps the
	// secrets an update supersedes or a delete gives up while a lease not
	// proven clean uses them; reporters (a []environment.UsageReporter)
	// tell what else references an environment (leases, setup sessions;
	// those that are also environment.ReferenceClearers are cleared on
	// delete); protected (a func(context.Context, *environment.Environment)
	// string, or nil) names why an environment may never be deleted.
	WireCatalog func(opts any, keeper any, reporters any, protected any)

	// CachedHealth wraps st (an environment.HealthStore) with a cache of
	// its reads for the gate, which reads an environment's provider health
	// on every lease: a record, or its absence, is answered from the cache
	// for up to maxStaleness (one second when 0). A put through the
	// wrapper replaces the cached record at once; another process's
	// measurement is seen within maxStaleness. A negative maxStaleness
	// returns st. Lists are not cached. The result is an
	// environment.HealthStore.
	CachedHealth func(st any, maxStaleness time.Duration) any

	// Draft validates a draft config as Catalog.Create would (driver,
	// test mode, schema) without saving anything or touching the secret
	// store, for draft probes (PRB-4); cat is an *environment.Catalog. It
	// needs ActionProbe (PRB-7). It returns the driver and the normalized
	// config, whose secret fields still hold the pasted values: it must
	// not be logged or shown. A config pointing at a stored secret is
	// refused.
	Draft func(cat any, ctx context.Context, p authz.Principal, driver string, cfg map[string]any) (drivers.Driver, config.Config, error)

	// Scrubber returns a function that replaces, in a text, every secret
	// value that environment id's config holds with config.Redacted; cat
	// is an *environment.Catalog. It needs ActionProbe. The values stay
	// inside the function.
	Scrubber func(cat any, ctx context.Context, p authz.Principal, id string) (func(string) string, error)

	// Check returns env's driver and effective capability set when env (an
	// *environment.Environment) can be a working target for gate (an
	// *environment.Gate) and its effective set covers required, else an
	// *environment.Error naming env.
	Check func(gate any, ctx context.Context, env any, required drivers.Set) (drivers.Driver, drivers.Set, error)
)
