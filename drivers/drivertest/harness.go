package drivertest

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
)

// Harness gives the conformance suite one driver under test and a config
// that reaches a working target. A fresh Harness is made for every subtest.
type Harness interface {
	// Driver returns the driver under test.
	Driver() drivers.Driver
	// Config returns a normalized config with secrets resolved, ready for
	// Acquire, that reaches the harness's target.
	Config() drivers.Config
	// Close releases whatever the harness holds. It is called once, at the
	// end of the subtest.
	Close()
}

// HarnessMaker makes a fresh Harness. It may call t.Skip (through
// testenv.Missing) when the real component is unavailable.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)
