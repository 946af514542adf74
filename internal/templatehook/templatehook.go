// Package templatehook builds the templates Service that berth.New hands
// out as System.Templates, and the environment.UsageReporter it wires into
// the catalog (CONVENTIONS 24): the Service's collaborators are the
// System's own stores, lease manager and secret store, so no host or
// driver author constructs one. Package templates sets New in its init.
package templatehook

import (
	"context"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
)

// Sources are what a templates Service reads and acts through; every
// field is required.
type Sources struct {
	// Templates is the template and history store: a templates.Store.
	Templates any
	// Environments holds the environment records whose ActiveTemplate the
	// service changes by compare-and-swap on the revision.
	Environments environment.Store
	// Drivers resolves environment drivers.
	Drivers *drivers.Registry
	// Leases hands out the handle of a live lease to capture
	// (lease.Manager.Open).
	Leases *lease.Manager
	// LeaseRecords is the lease store, read to find live leases that use a
	// template before deleting it (IMG-8).
	LeaseRecords lease.Store
	// Secrets resolves the secret references of an environment's config
	// for a provider deletion and the setup checks (the host's
	// SecretStore.Get); nil: a deletion that needs a credential fails and
	// stays wanted.
	Secrets func(ctx context.Context, ref config.SecretRef) (string, error)
}

// New returns the *templates.Service over src with opts (a
// *templates.Options, or nil), and the environment.UsageReporter that
// lists the active setup sessions of an environment for the catalog's
// blast radius (CFG-7). It acts for no principal, so it is no method of
// the Service.
var New func(src Sources, opts any) (svc any, usage environment.UsageReporter)
