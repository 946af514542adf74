package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/instancehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease"
)

// CFG-9: with environments disabled no run starts: Attach refuses before
// installing anything and Attachment.Start refuses a new task, while a
// task already started is still waited for and read, and the lease is
// released with proof. Enabled again, Attach works.
func TestDisabledEnvironmentsRefuseAttachAndStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
	svc, reader := hs.(*instance.Service), hr.(instance.Reader)
	set := func(enable bool) {
		t.Helper()
		if _, err := svc.Update(ctx, leaseOperator, instance.AnyRevision, func(c *instance.Settings) error { c.EnableEnvironments = enable; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	w := newLeaseWorldWith(t, time.Minute, serverOptions{Options: controller.Options{Settings: reader}})

	// Attach refused.
	h := w.acquire(t)
	set(false)
	_, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{})
	if !errors.Is(err, instance.ErrEnvironmentsDisabled) || !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), "enableEnvironments") {
		t.Fatalf("Attach while disabled = %v, want ErrEnvironmentsDisabled naming the setting", err)
	}
	// Enabled: attach (so the refused one left no attachment behind: a
	// second Attach of a lease would fail) and run a task; disabled again: no new task, the
	// started one is still read.
	set(true)
	att, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	task, err := att.Start(ctx, leaseOperator, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"sh", "-c", "echo before; exit 4"}}})
	if err != nil {
		t.Fatal(err)
	}
	killTagged(t, task.ID())
	set(false)
	if _, err := att.Start(ctx, leaseOperator, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"true"}}}); !errors.Is(err, instance.ErrEnvironmentsDisabled) {
		t.Errorf("Start while disabled = %v, want ErrEnvironmentsDisabled", err)
	}
	exit, err := task.Wait(ctx)
	if err != nil || exit.Code != 4 {
		t.Errorf("Wait of the task started before = %+v, %v; want exit 4", exit, err)
	}
	chunks, err := task.Output(ctx, 0)
	var out strings.Builder
	for _, c := range chunks {
		out.Write(c.Data)
	}
	if err != nil || out.String() != "before\n" {
		t.Errorf("Output of the task started before = %q, %v", out.String(), err)
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Cleanup != "confirmed" {
		t.Errorf("Release while disabled = %+v, %v; want a confirmed cleanup", l, err)
	}
}

// Issue 56: a minimum isolation raised after a lease's acquisition holds
// for the runs that start after it: Attach of that lease is refused with
// the reason isolation_below_minimum, naming the lease, its level and the
// minimum; lowered again, Attach works.
func TestRaisedMinimumIsolationRefusesAttachOfAnEarlierLease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
	svc, reader := hs.(*instance.Service), hr.(instance.Reader)
	setMin := func(l drivers.Isolation) {
		t.Helper()
		if _, err := svc.Update(ctx, leaseOperator, instance.AnyRevision, func(c *instance.Settings) error { c.MinimumIsolation = l; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	w := newLeaseWorldWith(t, time.Minute, serverOptions{Options: controller.Options{Settings: reader}})
	h := w.acquire(t)
	setMin(drivers.IsolationGVisor)
	_, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{})
	if !errors.Is(err, drivers.ErrUnavailable) || errcode.ReasonOf(err) != "isolation_below_minimum" ||
		!strings.Contains(err.Error(), h.ID()) || !strings.Contains(err.Error(), "below the instance's minimum gvisor") {
		t.Fatalf("Attach after the minimum was raised = %v, want isolation_below_minimum naming the lease and the minimum", err)
	}
	setMin(drivers.IsolationNone)
	if _, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{}); err != nil {
		t.Fatalf("Attach with the minimum lowered again: %v", err)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Errorf("Release: %v", err)
	}
}
