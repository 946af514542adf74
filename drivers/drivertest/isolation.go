package drivertest

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/isolation"
)

// IsolationHarness is the interface a Harness implements when its driver
// declares an isolation level above none for the harness's config
// (drivers.IsolationOf). HostKernel returns the kernel release (as uname
// -r prints it) of the machine the harness's sandboxes run on: the Docker
// engine's KernelVersion (docker info), not this process's own uname,
// since the engine may be remote. The isolation subtest compares what the
// task sees with it.
type IsolationHarness interface {
	HostKernel(ctx context.Context) (string, error)
}

// testIsolation: the level a driver declares for the harness's config
// (drivers.IsolationDeclarer) is at most what a task inside a live sandbox
// shows (internal/isolation.Measure, which the probe measures with too); a driver that declares more fails, naming
// both levels and the evidence. Declaring less than measured is allowed.
//
// Requirements: ISO-1.
func testIsolation(t *testing.T, ctx context.Context, h Harness) {
	d := h.Driver()
	declared := drivers.IsolationOf(d, h.Config())
	kind := d.Capabilities().Kind
	if declared == drivers.IsolationNone {
		t.Skipf("driver %q declares isolation none: nothing to prove", d.Name())
	}
	var hostKernel string
	if kind != drivers.KindHost {
		ih, ok := h.(IsolationHarness)
		if !ok {
			t.Fatalf("driver %q declares isolation %s, but the harness does not implement drivertest.IsolationHarness: the suite needs the host's kernel release to measure it", d.Name(), declared)
		}
		var err error
		if hostKernel, err = ih.HostKernel(ctx); err != nil || hostKernel == "" {
			t.Fatalf("HostKernel: %q, %v; want the kernel release of the machine the sandboxes run on", hostKernel, err)
		}
	}
	sb := acquire(t, ctx, h, drivers.AcquireRequest{LeaseID: "conformance-" + uniqueSuffix()})
	measured, ev, err := isolation.Measure(ctx, kind == drivers.KindHost, hostKernel, sb.Exec)
	if err != nil {
		t.Fatalf("measuring isolation: %v", err)
	}
	t.Logf("declared %s, measured %s (kind %v; %s)", declared, measured, kind, ev)
	if declared > measured {
		t.Errorf("driver %q declares isolation %s but its sandbox measures %s (kind %v; %s)",
			d.Name(), declared, measured, kind, ev)
	}
}
