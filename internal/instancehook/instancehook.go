// Package instancehook builds the instance settings Service that
// berth.New hands out as System.Settings, and the instance.Reader that
// the System's availability gate, lease manager and runner controller
// read the settings through (CONVENTIONS 24): the Reader answers for no
// principal, so only berth.New (and berth's tests) build the pair, and a
// host reads and changes the settings through System.Settings. Package
// instance sets New in its init.
package instancehook

import (
	"log/slog"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/clock"
)

// Options configure the Service; the zero value means defaults.
type Options struct {
	// Authorizer decides reads (authz.ActionRead) and updates
	// (authz.ActionUpdate) of the resource authz.ResourceKindInstanceSettings.
	// Default authz.DefaultPolicy: every known role reads, instance
	// admins and local operators update.
	Authorizer authz.Authorizer
	// Logger receives one line per update and per refused update. Default:
	// discard.
	Logger *slog.Logger
	// MaxStaleness bounds how old the settings the Reader returns may be:
	// it reads the store again once its copy is older. Updates through
	// this Service are seen by its Reader at once; a change by another
	// process (a replica on the same store) within MaxStaleness. Default
	// one second; negative: no cache, every Current reads the store.
	MaxStaleness time.Duration
	// Clock stamps UpdatedAt and ages the Reader's cache (tests set it).
	// Default: the wall clock.
	Clock clock.Clock
}

// New returns the *instance.Service over st (an instance.Store) and the
// instance.Reader the gate reads; the Service's reads and updates
// refresh the Reader's copy. It panics if st is no instance.Store.
var New func(st any, o Options) (svc, reader any)
