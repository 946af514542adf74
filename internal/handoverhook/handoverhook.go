// Package handoverhook builds the handover Service that berth.New hands
// out as System.Handover, and the controller.SecretResolver it gives the
// runner controller (CONVENTIONS 24): the resolver returns plaintext
// secret values for no principal, so only berth.New (and berth's tests)
// may hold one, and no host or driver author constructs the Service.
// Package handover sets New in its init.
package handoverhook

import (
	"log/slog"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/lease"
)

// Sources are what a handover Service reads and acts through, and how it
// is configured. Checks, Environments, Drivers, Leases and Secrets are
// required (New returns an error without one).
type Sources struct {
	// Checks stores the project auth check records: a handover.Store.
	Checks any
	// Environments and Drivers give the prepared environment's
	// fingerprint and provider.
	Environments environment.Store
	Drivers      *drivers.Registry
	// Leases give a session's lease (its fingerprint, provider, company
	// and the secret env map of its config) at dispatch.
	Leases lease.Store
	// Secrets is the host's secret store the values are read from at
	// delivery.
	Secrets environment.SecretStore

	// Authorizer decides ActionAuthCheck and ActionUseAccount. Default:
	// authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Checker is the host's project auth check (berth.Options.
	// ProjectAuthChecker): a handover.Checker, or nil, and then a
	// preparation stays pending until RecordResult stores the host's
	// answer.
	Checker any
	// Logger receives one line per preparation, answer, clear and refused
	// hand-over; never a secret. Default: discard.
	Logger *slog.Logger
}

// New returns the *handover.Service over src and the resolver to give
// controller.New: its Check is Service.Check's (authorized with the
// dispatching principal), its Resolve returns plaintext secret values at
// delivery, for no principal.
var New func(src Sources) (svc any, resolver controller.SecretResolver, err error)
