package instance

import (
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/instancehook"
)

// DefaultMaxStaleness is the Reader's default staleness bound, for this
// package's external tests.
const DefaultMaxStaleness = defaultMaxStaleness

// NewService is what berth.New builds through internal/instancehook, for
// this package's external tests; o nil means defaults.
func NewService(st Store, o *instancehook.Options) (*Service, Reader) {
	var v instancehook.Options
	if o != nil {
		v = *o
	}
	return newService(st, v)
}

// WithClock returns a copy of o (nil: defaults) whose Service and Reader
// read the time from c.
func WithClock(o *instancehook.Options, c clock.Clock) *instancehook.Options {
	var v instancehook.Options
	if o != nil {
		v = *o
	}
	v.Clock = c
	return &v
}
