package instance

import "github.com/berthdev/berth/clock"

// DefaultMaxStaleness is Options.MaxStaleness's default, for this
// package's external tests.
const DefaultMaxStaleness = defaultMaxStaleness

// WithClock returns a copy of o (nil: defaults) whose Service and Reader
// read the time from c, for this package's external tests.
func WithClock(o *Options, c clock.Clock) *Options {
	var v Options
	if o != nil {
		v = *o
	}
	v.clock = c
	return &v
}
