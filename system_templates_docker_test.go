package berth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/templates"
)

// Issue 27 on the real Docker engine: lease the busybox test image, write
// a file, capture, promote; a new lease sees the file and reports the
// template's identity (IMG-3, IMG-8); a qualification recorded before the
// promote is stale after it, and a probe records one for the template
// (QUAL-3); a reusable lease made before the promote is replaced with
// template_changed (LEASE-4); rollback; revoke
// with deletion waits while a lease uses the template and removes the
// image once it is released, with the receipt stored.
func TestTemplateFlowOnDocker(t *testing.T) {
	ctx := context.Background()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, &testimage.Options{Glibc: true}) // libc for the probe's platform
	run := randomHex(t)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveImagesAtCleanup(t, cli, "test.berth/run", run) // templates keep the config's labels
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "tpl-docker", Driver: "docker", Config: map[string]any{
		"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}})
	if err != nil {
		t.Fatal(err)
	}
	w := &tplWorld{sys: sys, env: env, img: img.Ref}
	exec := func(h *lease.Handle, script string) string {
		t.Helper()
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", script}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %+v, %v", script, res, err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	svc := sys.Templates()

	w.probe(t)
	if !w.qualified(t) {
		t.Fatal("not qualified after the probe")
	}
	reused := w.acquire(t, lease.ReuseByEnvironment)
	w.release(t, reused, lease.Stop)
	src := w.acquire(t, lease.Ephemeral)
	exec(src, "echo captured-by-berth > /tpl-marker")
	tpl1, err := svc.Capture(ctx, tplOps, src.ID(), "issue 27")
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	w.release(t, src, lease.Destroy)
	if tpl1.State != templates.StateCaptured || !strings.HasPrefix(tpl1.Identity, "berth.local/templates/") {
		t.Fatalf("captured %+v", tpl1)
	}
	if _, err := svc.Promote(ctx, tplOps, tpl1.ID); err != nil {
		t.Fatal(err)
	}
	if v := w.view(t); v.ActiveTemplate == nil || v.ActiveTemplate.Drift != environment.DriftRelinked {
		t.Fatalf("after promote: %+v", v.ActiveTemplate)
	}
	if w.qualified(t) {
		t.Error("a qualification recorded before the promote is still valid after it (QUAL-3)")
	}
	w.probe(t)
	if !w.qualified(t) {
		t.Error("a probe after the promote did not qualify the template")
	}
	h := w.acquire(t, lease.Ephemeral)
	if got := exec(h, "cat /tpl-marker"); got != "captured-by-berth" {
		t.Errorf("a lease after the promote reads %q from the captured file", got)
	}
	if got := w.identity(t, h); got != tpl1.Identity {
		t.Errorf("a lease after the promote reports %s, want the template's %s", got, tpl1.Identity)
	}
	r2 := w.acquire(t, lease.ReuseByEnvironment)
	if l := r2.Lease(); l.Replaces != reused.ID() || l.ReplaceReason != "template_changed" {
		t.Errorf("reusable lease: replaces %q reason %q, want %s and %s", l.Replaces, l.ReplaceReason, reused.ID(), "template_changed")
	}
	if got := exec(r2, "cat /tpl-marker"); got != "captured-by-berth" {
		t.Errorf("the replacement reads %q", got)
	}
	w.release(t, r2, lease.Destroy)

	exec(h, "echo second > /tpl-marker")
	tpl2, err := svc.Capture(ctx, tplOps, h.ID(), "issue 27 second")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Promote(ctx, tplOps, tpl2.ID); err != nil {
		t.Fatal(err)
	}
	h2 := w.acquire(t, lease.Ephemeral)
	if got := exec(h2, "cat /tpl-marker"); got != "second" {
		t.Errorf("a lease of the second template reads %q", got)
	}
	w.release(t, h2, lease.Destroy)
	if _, err := svc.Rollback(ctx, tplOps, tpl1.ID); err != nil {
		t.Fatal(err)
	}
	h3 := w.acquire(t, lease.Ephemeral)
	if got := exec(h3, "cat /tpl-marker"); got != "captured-by-berth" {
		t.Errorf("a lease after the rollback reads %q", got)
	}
	w.release(t, h3, lease.Destroy)

	// h (from tpl1) is still live: the deletion waits.
	tpl1, err = svc.Revoke(ctx, tplOps, tpl1.ID, templates.RevokeOptions{Delete: true})
	if err != nil || tpl1.State != templates.StateRevoked || !tpl1.DeleteWanted || !strings.Contains(tpl1.DeleteNote, h.ID()) {
		t.Fatalf("revoke while in use: %+v, %v", tpl1, err)
	}
	ref := tpl1.Identity
	if _, err := cli.ImageInspect(ctx, ref[strings.Index(ref, "@")+1:]); err != nil {
		t.Fatalf("the template's image is gone while a lease uses it: %v", err)
	}
	w.release(t, h, lease.Destroy)
	// The second template was committed from a container of the first, so
	// its image is a child of the first's: the engine refuses to remove
	// the first while the second exists. The second goes first, at once:
	// nothing uses it.
	tpl2, err = svc.Revoke(ctx, tplOps, tpl2.ID, templates.RevokeOptions{Delete: true})
	if err != nil || tpl2.State != templates.StateDeleted || tpl2.DeleteReceipt == nil || !tpl2.DeleteReceipt.Confirmed {
		t.Errorf("revoke with deletion of an unused template: %+v, %v", tpl2, err)
	}
	rep, err := sys.Sweep(ctx, tplOps)
	if err != nil || rep.TemplatesDeleted != 1 {
		got, _ := svc.Get(ctx, tplOps, tpl1.ID)
		t.Fatalf("System.Sweep: %+v, %v; template %+v", rep, err, got)
	}
	tpl1, _ = svc.Get(ctx, tplOps, tpl1.ID)
	if tpl1.State != templates.StateDeleted || tpl1.DeleteReceipt == nil || !tpl1.DeleteReceipt.Confirmed || tpl1.DeleteReceipt.Evidence == "" {
		t.Errorf("after the sweep: %+v", tpl1)
	}
	if _, err := cli.ImageInspect(ctx, ref[strings.Index(ref, "@")+1:]); !cerrdefs.IsNotFound(err) {
		t.Errorf("the deleted template's image: inspect %v, want not found", err)
	}
	if _, err := svc.Revoke(ctx, tplOps, tpl2.ID, templates.RevokeOptions{}); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("revoke of a deleted template: %v, want ErrConflict", err)
	}
}

// Issue 27 with capture_repository at a loopback registry: the template's
// identity is the pushed digest; with the engine's copy removed, a new
// lease pulls the template by digest and sees the captured file; revoke
// with deletion removes it from the engine and the registry, with the
// receipt stored.
func TestTemplateFromCaptureRepositoryOnDocker(t *testing.T) {
	ctx := context.Background()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	run := randomHex(t)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveImagesAtCleanup(t, cli, "test.berth/run", run)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	repo := reg.Host + "/berth/templates"
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "tpl-pushed", Driver: "docker", Config: map[string]any{
		"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run},
		"capture_repository": repo}})
	if err != nil {
		t.Fatal(err)
	}
	w := &tplWorld{sys: sys, env: env, img: img.Ref}
	svc := sys.Templates()
	src := w.acquire(t, lease.Ephemeral)
	if res, err := src.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "echo pushed > /tpl-marker"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write the marker: %+v, %v", res, err)
	}
	tpl, err := svc.Capture(ctx, tplOps, src.ID(), "pushed")
	if err != nil {
		t.Fatal(err)
	}
	w.release(t, src, lease.Destroy)
	if !strings.HasPrefix(tpl.Identity, repo+"@sha256:") {
		t.Fatalf("identity %s, want %s@sha256:...", tpl.Identity, repo)
	}
	if _, err := svc.Promote(ctx, tplOps, tpl.ID); err != nil {
		t.Fatal(err)
	}
	ins, err := cli.ImageInspect(ctx, tpl.Identity)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ImageRemove(ctx, ins.ID, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
		t.Fatalf("remove the engine's copy: %v", err)
	}
	h := w.acquire(t, lease.Ephemeral)
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"cat", "/tpl-marker"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "pushed" {
		t.Errorf("a lease pulled from the registry reads %+v, %v", res, err)
	}
	if got := w.identity(t, h); got != tpl.Identity {
		t.Errorf("it reports %s, want %s", got, tpl.Identity)
	}
	w.release(t, h, lease.Destroy)
	tpl, err = svc.Revoke(ctx, tplOps, tpl.ID, templates.RevokeOptions{Delete: true})
	if err != nil || tpl.State != templates.StateDeleted || tpl.DeleteReceipt == nil || !strings.Contains(tpl.DeleteReceipt.Evidence, "registry") {
		t.Fatalf("revoke with deletion: %+v, %v", tpl, err)
	}
	if _, err := cli.ImageInspect(ctx, tpl.Identity); !cerrdefs.IsNotFound(err) {
		t.Errorf("the template is still in the engine: %v", err)
	}
}
