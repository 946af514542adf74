package docker_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"

	"github.com/berthdev/berth/drivers/drivertest"
)

// HostKernel implements drivertest.IsolationHarness: the engine's kernel
// release, as docker info reports it.
func (h *harness) HostKernel(ctx context.Context) (string, error) {
	info, err := h.e.cli.Info(ctx)
	if err != nil {
		return "", err
	}
	return info.KernelVersion, nil
}

var _ drivertest.IsolationHarness = (*harness)(nil)

// Docker declares container, and gvisor for a config whose runtime is
// runsc (the runtime field's schema comes with issue 56's item 2).
func TestIsolationByRuntime(t *testing.T) {
	d := docker.New(nil)
	if got := drivers.IsolationOf(d, nil); got != drivers.IsolationContainer {
		t.Errorf("default isolation = %s, want container", got)
	}
	if got := drivers.IsolationOf(d, config.Config{"runtime": "runsc"}); got != drivers.IsolationGVisor {
		t.Errorf("isolation under runsc = %s, want gvisor", got)
	}
}
