package leasetest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// BenchmarkAcquireRelease measures ephemeral acquire + destroy release
// cycles through a lease.Manager over store with the fake driver, and, as
// the anchor in the same run, the same cycles on the fake driver alone. It
// reports manager cycles/s, driver cycles/s and the ratio x-driver (the
// manager's cost as a multiple of the bare driver's), and kept-B/cycle,
// the heap the cycles leave behind (the store's history of ended leases
// and the fake's record of every sandbox it made), per cycle.
//
// ctx is the callers' context. One that never ends (context.Background)
// is a caller who waits for each acquisition to its end: the manager runs
// the acquisition in the caller's goroutine. One that may end (a request's)
// is a caller who may stop waiting: the manager hands the acquisition to
// a goroutine of its own and waits for it, a hand-over each cycle.
func BenchmarkAcquireRelease(b *testing.B, ctx context.Context, store lease.Store) {
	fk := fake.New(nil)
	cfg, err := fk.Schema().Normalize(map[string]any{})
	if err != nil {
		b.Fatal(err)
	}
	env := &environment.Environment{ID: "bench-env", Name: "bench", Driver: fk.Name(), Status: environment.StatusActive, Config: cfg, Revision: 1}
	envs := envhook.NewMemoryStore().(environment.Store)
	if err := envs.CreateEnvironment(ctx, env, false); err != nil {
		b.Fatal(err)
	}
	reg := drivers.NewRegistry(fk)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, &envhook.Options{TestMode: true}).(*environment.Assignments)
	mgr, _ := leasehook.New(leasehook.Sources{Store: store, Drivers: reg, Assignments: asg, Options: &lease.Options{InstanceID: "bench"}})
	m := mgr.(*lease.Manager)
	op := authz.Principal{ID: "bench", Role: authz.RoleLocalOperator}

	// kept-B/cycle is measured from here, before the anchor, whose heap is
	// garbage once it ends (a collection now, rather than after the
	// anchor, leaves the collector's pacing of the cycles as it was).
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	// The anchor runs on a driver of its own: the fake remembers every
	// sandbox it made, and the manager's cycles must not pay for a heap
	// the anchor's left behind.
	bare := fake.New(nil)
	anchorStart := time.Now()
	for range b.N {
		sb, err := bare.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "anchor", Labels: map[string]string{"k": "v"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
			b.Fatal(err)
		}
	}
	anchor := time.Since(anchorStart)

	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		h, err := m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: fmt.Sprint("run-", i)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m) // and through it the store and the driver
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
	b.ReportMetric(float64(b.N)/anchor.Seconds(), "driver-cycles/s")
	b.ReportMetric(elapsed.Seconds()/anchor.Seconds(), "x-driver")
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/float64(b.N), "kept-B/cycle")
}
