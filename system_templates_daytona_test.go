package berth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/templates"
)

// Issue 27 on Daytona (its fake API, which follows daytonaio/daytona
// v0.190.0's snapshot rules, internal/daytonafake): a file written
// in a lease's sandbox is captured into a snapshot; once promoted, new
// leases start from the snapshot, see the file and report its identity;
// Daytona deletes a snapshot whatever uses it, so revoke with deletion
// waits in berth for the live lease that uses it, and the sweep deletes it
// once the lease is released, storing the read-back receipt; the snapshot
// is gone at the provider and the environment's configured snapshot
// applies again.
func TestTemplateFlowOnDaytona(t *testing.T) {
	ctx := context.Background()
	srv, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	base, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	drv := daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, CleanupTimeout: 10 * time.Second})
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{drv}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Close() })
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "daytona", Driver: "daytona", Config: map[string]any{
		"api_url": srv.URL(), "api_key": srv.APIKey(), "organization_id": srv.OrganizationID(),
		"snapshot_id": base.ID,
	}})
	if err != nil {
		t.Fatal(err)
	}
	acquire := func() *lease.Handle {
		t.Helper()
		h, err := sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		return h
	}
	identity := func(h *lease.Handle) string {
		t.Helper()
		id, err := leasehook.ImageIdentity(h, ctx)
		if err != nil {
			t.Fatalf("ImageIdentity: %v", err)
		}
		return id.String()
	}
	exec := func(h *lease.Handle, script string) string {
		t.Helper()
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", script}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %+v, %v", script, res, err)
		}
		return string(res.Stdout)
	}
	release := func(h *lease.Handle) {
		t.Helper()
		if _, err := sys.Leases().Release(ctx, tplOps, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Fatalf("release %s: %v", h.ID(), err)
		}
	}

	src := acquire()
	baseID := identity(src)
	exec(src, `echo set-up > "$HOME/mark"`)
	svc := sys.Templates()
	tpl, err := svc.Capture(ctx, tplOps, src.ID(), "with mark")
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if tpl.State != templates.StateCaptured || !strings.HasPrefix(tpl.Identity, "snapshot:daytona/") || tpl.Identity == baseID {
		t.Fatalf("captured %+v, want a new daytona snapshot identity (the base is %s)", tpl, baseID)
	}
	release(src)
	snapID := strings.TrimPrefix(tpl.Identity, "snapshot:daytona/")
	if sn, ok := srv.LookupSnapshot(snapID); !ok || sn.State != "active" {
		t.Fatalf("the snapshot at the provider: %+v (found %t), want active", sn, ok)
	}
	if tpl, err = svc.Promote(ctx, tplOps, tpl.ID); err != nil || tpl.State != templates.StateActive {
		t.Fatalf("Promote: %+v, %v", tpl, err)
	}
	v, err := sys.Catalog().Get(ctx, tplOps, env.ID)
	if err != nil || v.ActiveTemplate == nil || v.ActiveTemplate.ID != tpl.ID || v.ActiveTemplate.Drift != environment.DriftRelinked {
		t.Fatalf("the environment after the promote: %+v, %v", v.ActiveTemplate, err)
	}

	h := acquire()
	if got := identity(h); got != tpl.Identity {
		t.Errorf("a lease after the promote runs %s, want the template %s", got, tpl.Identity)
	}
	if got := exec(h, `cat "$HOME/mark"`); got != "set-up\n" {
		t.Errorf("the captured file in a new lease: %q", got)
	}

	// Daytona would delete the snapshot under h; berth waits for h.
	tpl, err = svc.Revoke(ctx, tplOps, tpl.ID, templates.RevokeOptions{Delete: true, Reason: "rebuilt"})
	if err != nil || tpl.State != templates.StateRevoked || !tpl.DeleteWanted || tpl.DeleteReceipt != nil || !strings.Contains(tpl.DeleteNote, h.ID()) {
		t.Fatalf("Revoke --delete with a live lease: %+v, %v", tpl, err)
	}
	if _, ok := srv.LookupSnapshot(snapID); !ok {
		t.Fatal("the snapshot was deleted at the provider while a live lease used it")
	}
	plain := acquire() // the pointer is cleared: the configured snapshot, no fallback
	if got := identity(plain); got != baseID {
		t.Errorf("a lease after the revoke runs %s, want the configured %s", got, baseID)
	}
	release(plain)
	release(h)
	rep, err := sys.Sweep(ctx, tplOps)
	if err != nil || rep.TemplatesDeleted != 1 {
		t.Fatalf("System.Sweep after the release: %+v, %v; want one template deleted", rep, err)
	}
	tpl, err = svc.Get(ctx, tplOps, tpl.ID)
	if err != nil || tpl.State != templates.StateDeleted || tpl.DeleteReceipt == nil || !tpl.DeleteReceipt.Confirmed ||
		tpl.DeleteReceipt.EvidenceKind != drivers.EvidenceProvider || !strings.Contains(tpl.DeleteReceipt.Evidence, snapID) {
		t.Fatalf("after the sweep: %+v (receipt %+v), %v", tpl, tpl.DeleteReceipt, err)
	}
	if sn, ok := srv.LookupSnapshot(snapID); ok {
		t.Errorf("the snapshot is still at the provider after the confirmed deletion: %+v", sn)
	}
}
