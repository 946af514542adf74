package runner

import (
	"testing"

	"github.com/berthdev/berth/drivers"
)

// The runner's copy of the scheme stays the one drivers export (the runner
// sits below drivers and cannot import it).
func TestUnixSchemeIsTheDrivers(t *testing.T) {
	if unixScheme != drivers.UnixScheme {
		t.Errorf("unixScheme = %q, want drivers.UnixScheme %q", unixScheme, drivers.UnixScheme)
	}
}
