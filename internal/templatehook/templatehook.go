// Package templatehook builds the templates Service that berth.New hands
// out as System.Templates, and the environment.UsageReporter it wires into
// the catalog (CONVENTIONS 24): the Service's collaborators are the
// System's own stores, lease manager and secret store, so no host or
// driver author constructs one; the System's sweep and berth's own tests
// reach the rest through it. Package templates sets its hooks in its init.
package templatehook

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/berthdev/berth/authz"
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
	// Authorizer decides every action of the Service (the System's); nil:
	// authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Logger receives failures of best-effort steps (the System's); nil:
	// discard.
	Logger *slog.Logger
}

// New returns the *templates.Service over src with opts (a
// *templates.Options, or nil), and the environment.UsageReporter that
// lists the active setup sessions of an environment for the catalog's
// blast radius (CFG-7). It acts for no principal, so it is no method of
// the Service.
var New func(src Sources, opts any) (svc any, usage environment.UsageReporter)

// SweepSessions runs the setup sessions' part of System.Sweep on svc (a
// *templates.Service): it ends the sessions past their TTL, destroys the
// sandboxes of ended ones and prunes expired terminal tokens, and returns
// the templates.SessionSweepReport. p needs authz.ActionSweep.
var SweepSessions func(svc any, ctx context.Context, p authz.Principal) (report any, err error)

// SetTerminalRing sets the output ring each PTY of h (an http.Handler of
// templates.Service.TerminalHandler) keeps for reconnects to n bytes
// (default 1 MiB), before h serves; berth's own tests use it.
var SetTerminalRing func(h http.Handler, n int)
