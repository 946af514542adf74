package daytona_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/daytonafake"
)

// The driver has no runner ingress: Acquire with a Runner is refused with
// ErrUnsupported naming runner_ingress before any API call, so nothing is
// created, and the capability is not declared.
func TestRunnerRefusedBeforeAnythingIsAllocated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if e.drv.Capabilities().Declared.Has(drivers.CapRunnerIngress) {
		t.Errorf("daytona declares %s", drivers.CapRunnerIngress)
	}
	allocated := false
	spec := drivers.RunnerSpec{Binary: "/opt/berth/berth-runner", SHA256: strings.Repeat("ab", 32)}
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{
		LeaseID: "runner-refused", Runner: &spec,
		Allocated: func(context.Context, string) error { allocated = true; return nil },
	})
	if err == nil {
		_, _ = sb.Release(ctx, drivers.Destroy)
		t.Fatal("Acquire with a Runner succeeded, want a refusal")
	}
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), drivers.CapRunnerIngress.String()) {
		t.Errorf("Acquire with a Runner: err = %v, want ErrUnsupported naming %s", err, drivers.CapRunnerIngress)
	}
	if allocated {
		t.Error("Allocated was called")
	}
	for _, route := range []string{daytonafake.RouteCreateSandbox, daytonafake.RouteGetSnapshot} {
		if n := e.srv.Calls(route); n != 0 {
			t.Errorf("%d calls to %s, want 0", n, route)
		}
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes exist, want 0", n)
	}
	// The same config without a Runner does create: the refusal is the
	// Runner's, not the config's.
	sb, err = e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{LeaseID: "runner-refused-control"})
	if err != nil {
		t.Fatalf("Acquire without a Runner: %v", err)
	}
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Errorf("Release: %v", err)
	}
	if n := e.srv.Calls(daytonafake.RouteCreateSandbox); n != 1 {
		t.Errorf("%d creates after the control acquire, want 1", n)
	}
}
