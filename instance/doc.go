// Package instance holds the instance settings of CFG-9: whether
// environments can be working targets at all (EnableEnvironments),
// whether only managed sandboxes can (ManagedSandboxOnly), the least
// isolation every target's driver must declare (MinimumIsolation, which
// the environment gate enforces with the reason isolation_below_minimum),
// and the lease
// quotas every lease manager of the instance enforces (QuotaPerCompany,
// QuotaPerCompanyEnvironment, with lease.Options.Quotas), kept in the store
// and changed only by instance admins.
//
//	svc := sys.Settings() // sys is the *berth.System berth.New returned
//	s, err := svc.Get(ctx, anyone) // instance.Defaults() until first written
//	s, err = svc.Update(ctx, admin, s.Revision, func(c *instance.Settings) error {
//		c.EnableEnvironments = false
//		return nil
//	})
//
// berth.New builds the Service (internal/instancehook) over the store of
// Options.Stores and hands it out as System.Settings. Start with Settings and
// its Admit (the pure decision the environment gate makes for every
// resolution, probe and lease acquisition), then Service (reads by any
// known principal, updates by instance admins with an optimistic revision)
// and Store (NewMemoryStore here; the SQL stores in store/sqlite and
// store/postgres; instancetest.RunStoreTests is the conformance suite).
//
// When no record was ever written the settings are Defaults():
// environments enabled, host drivers allowed, quotas of 8 live leases per
// company and 4 per company on one environment, so embedding hosts keep
// working; a host that wants the source product's "enable it first"
// writes EnableEnvironments false at its first start.
//
// The gate reads the settings through the Reader berth.New builds with the
// Service, never the store directly: the Reader keeps what it read for a
// second, so a lease acquisition costs no store round trip while the copy
// is fresh; the System's own updates are seen at once, another replica's
// within the second.
package instance
