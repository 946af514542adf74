package lease_test

import (
	"context"
	"errors"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// hostFake is the fake declared as a host driver, for the refusals that
// only host leases get.
type hostFake struct{ *fake.Driver }

func (h hostFake) Capabilities() drivers.Capabilities {
	c := h.Driver.Capabilities()
	c.Kind = drivers.KindHost
	return c
}

// Issue 27: Open hands another manager the handle of a live sandbox lease,
// resumed by its provider id, to a principal who may lease it; others see
// a missing lease, an ended lease is a conflict.
func TestOpenResumesALiveSandboxLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	h := w.acquire(lease.Ephemeral, "")
	other := w.newManager(nil)
	o, err := other.Open(ctx, op, h.ID())
	if err != nil {
		t.Fatalf("Open from another manager: %v", err)
	}
	if o.SandboxID() != h.SandboxID() || !o.Resumed() {
		t.Errorf("opened sandbox %s (resumed %v), want %s resumed", o.SandboxID(), o.Resumed(), h.SandboxID())
	}
	if res, err := o.Exec(ctx, lease.Command{Argv: []string{"echo", "hi"}}); err != nil || string(res.Stdout) != "hi\n" {
		t.Errorf("exec through the opened handle: %+v, %v", res, err)
	}
	stranger := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"globex"}}
	if _, err := other.Open(ctx, stranger, h.ID()); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Open by an agent of another company: %v, want errcode.ErrNotFound", err)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(ctx, op, h.ID()); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("Open of a released lease: %v, want errcode.ErrConflict", err)
	}
}

// Issue 27: a host lease lives in the process that holds it; Open refuses
// it naming the driver.
func TestOpenRefusesHostLeases(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{wrap: func(f *fake.Driver, _ lease.Store) drivers.Driver { return hostFake{f} }})
	h := w.acquire(lease.Ephemeral, "")
	defer h.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if _, err := w.newManager(nil).Open(context.Background(), op, h.ID()); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("Open of a host lease: %v, want ErrUnsupported", err)
	}
}

// IMG-6, IMG-8, LEASE-4: with a relinked template a lease starts from its
// identity, is labelled with it, and a reusable lease made before is
// replaced with template_changed; a detached template is not used.
func TestLeaseStartsFromTheAppliedTemplate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	before := w.acquire(lease.ReuseByEnvironment, "r1")
	if _, err := before.Release(ctx, lease.ReleaseOptions{Disposition: lease.Stop}); err != nil {
		t.Fatal(err)
	}
	src := w.acquire(lease.Ephemeral, "")
	id, err := leasehook.Capture(src, ctx, drivers.CaptureRequest{Name: "tools"})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := w.envs.GetEnvironment(ctx, w.env.ID)
	if err != nil {
		t.Fatal(err)
	}
	setPointer := func(source string) {
		t.Helper()
		cur, err := w.envs.GetEnvironment(ctx, w.env.ID)
		if err != nil {
			t.Fatal(err)
		}
		next := *cur
		next.ActiveTemplate = &environment.ActiveTemplate{ID: "tpl-1", Identity: id.String(), SourceFingerprint: source}
		next.Revision++
		if err := w.envs.UpdateEnvironment(ctx, &next, cur.Revision); err != nil {
			t.Fatal(err)
		}
	}
	setPointer(envhook.SourceFingerprint(cur, w.fk))
	after, err := w.m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Workspace: "/work", Run: "r2", Policy: lease.ReuseByEnvironment})
	if err != nil {
		t.Fatal(err)
	}
	l := after.Lease()
	if l.Replaces != before.ID() || l.ReplaceReason != "template_changed" || l.Labels["berth.template-id"] != "tpl-1" {
		t.Errorf("lease after the promote: replaces %q (%s), labels %v; want %s, template_changed, tpl-1", l.Replaces, l.ReplaceReason, l.Labels, before.ID())
	}
	if live, err := leasehook.ImageIdentity(after, ctx); err != nil || live != id {
		t.Errorf("live image %s, %v; want the template's %s", live, err, id)
	}
	if l.Config.String("image") != id.String() {
		t.Errorf("recorded image %q, want the template's %s", l.Config.String("image"), id)
	}
	setPointer("sha256:another-source")
	plain := w.acquire(lease.Ephemeral, "")
	if pl := plain.Lease(); pl.Labels["berth.template-id"] != "" || pl.Config.String("image") == id.String() {
		t.Errorf("a detached template was used: labels %v, image %q", pl.Labels, pl.Config.String("image"))
	}
}
