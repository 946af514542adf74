package environment

import (
	"log/slog"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/clock"
)

// common is what newCatalog and newAssignments build alike from the
// options fields they share, with the defaults documented there.
type common struct {
	authz  authz.Authorizer
	log    *slog.Logger
	clock  clock.Clock
	health HealthStore
	gate   *gate
}

// common returns the shared setup of o; a nil o means defaults.
func (o *options) common(reg *drivers.Registry) common {
	var v options
	if o != nil {
		v = *o
	}
	c := common{authz: v.Authorizer, log: v.Logger, clock: v.clock, health: v.Health}
	if c.authz == nil {
		c.authz = authz.DefaultPolicy{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	if c.health == nil {
		c.health = newMemoryHealthStore()
	}
	v.Health = c.health
	c.gate = newGate(reg, &v)
	return c
}
