package daytona_test

import (
	"context"
	"os"
	"strings"

	"github.com/berthdev/berth/drivers/drivertest"
)

// HostKernel implements drivertest.IsolationHarness: the fake Daytona API
// (internal/daytonafake) runs a sandbox's commands as processes of this
// host, so its kernel is this host's.
func (h *harness) HostKernel(context.Context) (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b)), err
}

var _ drivertest.IsolationHarness = (*harness)(nil)
