// Package probehook builds the Prober that berth.New hands out as
// System.Prober (CONVENTIONS 24): its collaborators are the System's own
// catalog, gate, lease manager and stores, which only berth.New (and
// berth's tests) hold, so no host or driver author constructs one. Package
// probe sets New in its init.
package probehook

import (
	"log/slog"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// Sources are what a Prober reads and acts through. The first six fields
// are required (New panics without one).
type Sources struct {
	// Catalog authorizes every probe (PRB-7), reads the principal's view
	// of saved environments, resolves drafts and measures provider health.
	Catalog *environment.Catalog
	// Environments is the catalog's store. The Prober reads saved
	// environments through it as stored (config with secret references,
	// never values), and only what it derives without showing, after the
	// catalog authorized the principal: the qualification subject of
	// Prober.Qualification (its fingerprint covers the secret references
	// that the principal's redacted view leaves out).
	Environments environment.Store
	// Gate is the availability check a saved environment passes before
	// its lease (CAP-3): the gate of the catalog's test mode and health
	// store: what envhook.NewGate returns with the same Options.
	Gate any
	// Drivers are the registered drivers.
	Drivers *drivers.Registry
	// Leases acquires and releases the probes' ephemeral leases, for the
	// probing principal.
	Leases *lease.Manager
	// Qualifications keeps the qualification records (QUAL-1..7).
	Qualifications qualification.Store

	// Logger receives one line per probe (target, code, duration); never a
	// secret or a config value. Default: discard.
	Logger *slog.Logger
	// Controller attaches the runner of a runner-based probe
	// (probe.Request.Runner, PRP-8) and serves it for the probe's lease;
	// Runners returns the runner binaries on this host, one per
	// architecture. Without both, runner-based probes fail as unsupported.
	Controller *controller.Controller
	Runners    func() (*drivers.RunnerSet, error)
}

// New returns a *probe.Prober over src. It panics if a required field of
// src is nil (a programming error of berth).
var New func(src Sources) any
