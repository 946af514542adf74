package lease_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/lease"
)

// TestHolderRenewsItsClaim (issue 10 item 4): the manager holding a host
// lease (the local driver) renews its claim every heartbeat on its clock,
// so the claim always lasts three heartbeats from the last
// renewal; the holder's own release ends the session with a receipt.
func TestHolderRenewsItsClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	drv := local.New(nil)
	reg := drivers.NewRegistry(drv)
	cfg, err := drv.Schema().Normalize(map[string]any{"workdir": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	envs := envhook.NewMemoryStore().(environment.Store)
	if err := envs.CreateEnvironment(ctx, &environment.Environment{ID: "here", Name: "here", Driver: drv.Name(),
		Status: environment.StatusActive, Config: cfg, Revision: 1}, false); err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemoryStore()
	const beat = 10 * time.Second
	m, _ := newManagerWith(store, reg, envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments), nil, &mopts{Options: knobbed(&lease.Options{}, func(k *leasetune.Knobs) { k.HostHeartbeat = beat }), Sources: &leasehook.Sources{Clock: clk}})
	defer lease.Close(m)
	h, err := m.Acquire(ctx, op, lease.AcquireRequest{EnvironmentID: "here", Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if l := h.Lease(); l.Holder == "" || !l.HolderUntil.Equal(t0.Add(3*beat)) {
		t.Fatalf("acquired: holder %q until %s; want a holder until %s", l.Holder, l.HolderUntil, t0.Add(3*beat))
	}
	for i := 1; i <= 2; i++ {
		clk.WaitForWaiters(1, nil) // the heartbeat waits on the clock
		clk.Advance(beat)
		want := t0.Add(time.Duration(i)*beat + 3*beat)
		for { // until the heartbeat goroutine has written the renewal
			l, err := store.GetLease(ctx, h.ID())
			if err != nil {
				t.Fatal(err)
			}
			if l.HolderUntil.Equal(want) {
				break
			}
			runtime.Gosched()
		}
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	l, _ := store.GetLease(ctx, h.ID())
	if l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Errorf("after the holder's release: %s, cleanup %s", l.Status, l.Cleanup)
	}
}
