package docker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/images"
)

// captureFile acquires a sandbox of cfg, writes /etc/berth-setup in it and
// captures it; the captured image is removed at cleanup.
func captureFile(t *testing.T, ctx context.Context, e *env, cfg config.Config, content string) images.Identity {
	t.Helper()
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "setup-lease"})
	run(t, ctx, sb, "sh", "-c", "echo "+content+" > /etc/berth-setup")
	id, err := sb.(drivers.Capturer).Capture(ctx, drivers.CaptureRequest{Name: "in use"})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatalf("Release of the setup sandbox: %v", err)
	}
	return id
}

// wantInUse checks that DeleteTemplate of id is refused with ErrInUse that
// names the template and says the delete is to be retried.
func wantInUse(t *testing.T, ctx context.Context, e *env, cfg config.Config, id images.Identity, why string) {
	t.Helper()
	rc, err := e.drv.DeleteTemplate(ctx, cfg, id)
	if !errors.Is(err, drivers.ErrInUse) {
		t.Fatalf("DeleteTemplate while %s = %+v, %v; want ErrInUse", why, rc, err)
	}
	if msg := err.Error(); !strings.Contains(msg, id.String()) || !strings.Contains(msg, "retried") {
		t.Errorf("DeleteTemplate while %s: error %q does not name the template and the retry", why, msg)
	}
	if rc.Confirmed {
		t.Errorf("DeleteTemplate while %s: receipt %+v is confirmed", why, rc)
	}
}

// wantDeleted deletes id twice: both are confirmed receipts, and the engine
// no longer has the image.
func wantDeleted(t *testing.T, ctx context.Context, e *env, cfg config.Config, id images.Identity, lookup string) {
	t.Helper()
	for i := range 2 {
		rc, err := e.drv.DeleteTemplate(ctx, cfg, id)
		if err != nil {
			t.Fatalf("DeleteTemplate #%d: %v", i+1, err)
		}
		if !rc.Confirmed || rc.State != drivers.StateDestroyed || rc.EvidenceKind != drivers.EvidenceProvider || rc.Evidence == "" {
			t.Errorf("DeleteTemplate #%d: receipt %+v, want a confirmed destroy with the engine's evidence", i+1, rc)
		}
	}
	if _, err := e.cli.ImageInspect(ctx, lookup); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect %s after DeleteTemplate: err = %v, want not found", lookup, err)
	}
}

// IMG-8: DeleteTemplate removes without force. An engine-local template
// that a running container (a lease of this instance) or a created,
// never-started container (made by someone else, through the engine API)
// uses is refused with ErrInUse and stays, usable; once they are gone it is
// removed with a confirmed receipt, and a second delete is confirmed too.
func TestDeleteTemplateInUseIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(e.img.Ref, nil)
	id := captureFile(t, ctx, e, cfg, "local")
	if !strings.HasPrefix(id.String(), docker.LocalRegistry+"/") {
		t.Fatalf("Capture = %s, want a %s identity", id, docker.LocalRegistry)
	}
	removeImageAtCleanup(t, e, id.Digest())
	tcfg := e.config(id.String(), nil)

	lease := e.acquire(ctx, tcfg, drivers.AcquireRequest{})
	wantInUse(t, ctx, e, cfg, id, "a lease runs it")
	if got := run(t, ctx, lease, "cat", "/etc/berth-setup"); got != "local\n" {
		t.Errorf("the lease after the refused delete reads %q", got)
	}
	ins, err := e.cli.ImageInspect(ctx, id.Digest())
	if err != nil || len(ins.RepoTags) != 1 {
		t.Fatalf("the template after the refused delete: %v, tags %v; want it with its tag", err, ins.RepoTags)
	}
	// Another acquire of the template works: it is still usable.
	second := e.acquire(ctx, tcfg, drivers.AcquireRequest{})
	if got := run(t, ctx, second, "cat", "/etc/berth-setup"); got != "local\n" {
		t.Errorf("a new lease of the template after the refused delete reads %q", got)
	}
	for _, sb := range []drivers.Sandbox{lease, second} {
		if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
			t.Fatal(err)
		}
	}

	// A container berth did not make, created and never started.
	foreign, err := e.cli.ContainerCreate(ctx, &container.Config{Image: id.Digest(), Cmd: []string{"true"},
		Labels: map[string]string{runLabel: e.run}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	wantInUse(t, ctx, e, cfg, id, "a stopped container of another user has it")
	if err := e.cli.ContainerRemove(ctx, foreign.ID, container.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	wantDeleted(t, ctx, e, cfg, id, id.Digest())
	if _, err := e.drv.Acquire(ctx, tcfg, drivers.AcquireRequest{}); !errors.Is(err, drivers.ErrImageNotFound) {
		t.Errorf("Acquire of the deleted template: err = %v, want ErrImageNotFound", err)
	}
}

// IMG-8, IMG-3: a template pushed to capture_repository (a loopback
// registry) that the engine no longer has is pulled by its digest on the
// next Acquire, which runs the captured state and reports the identity. A
// delete while that lease runs is refused with ErrInUse and takes nothing:
// not the engine's references, not the registry's manifest. After the
// release the delete is confirmed in the engine and the registry.
func TestPushedTemplateIsPulledAndDeletedOnlyWhenUnused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	repo := e.reg.Host + "/berth/templates"
	cfg := e.config(e.img.Ref, map[string]any{docker.FieldCaptureRepo: repo})
	id := captureFile(t, ctx, e, cfg, "pushed")
	if id.Digest() == "" || id.Repository() != repo {
		t.Fatalf("Capture = %s, want a digest in %s", id, repo)
	}
	removeImageAtCleanup(t, e, id.String())
	tcfg := e.config(id.String(), nil)

	// A lease of the template while the engine still has it (both tags).
	first := e.acquire(ctx, tcfg, drivers.AcquireRequest{})
	before, err := e.cli.ImageInspect(ctx, id.String())
	if err != nil {
		t.Fatal(err)
	}
	wantInUse(t, ctx, e, cfg, id, "a lease runs it")
	after, err := e.cli.ImageInspect(ctx, id.String())
	if err != nil {
		t.Fatalf("the template is gone from the engine after a refused delete: %v", err)
	}
	if !slices.Equal(before.RepoTags, after.RepoTags) || len(after.RepoTags) != 2 {
		t.Errorf("tags after the refused delete = %v, want %v (both: the berth.local one and the pushed one)", after.RepoTags, before.RepoTags)
	}
	if err := remoteHas(id.String()); err != nil {
		t.Errorf("the registry lost the template after a refused delete: %v", err)
	}
	if _, err := first.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}

	// The engine loses the image; the next lease pulls it by digest.
	if _, err := e.cli.ImageRemove(ctx, after.ID, image.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ImageInspect(ctx, id.String()); !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect after the local removal: err = %v, want not found", err)
	}
	gets := e.reg.ManifestGets()
	lease := e.acquire(ctx, tcfg, drivers.AcquireRequest{})
	if e.reg.ManifestGets() == gets {
		t.Errorf("Acquire of a template the engine lacks fetched no manifest; want a pull by digest")
	}
	if got := run(t, ctx, lease, "cat", "/etc/berth-setup"); got != "pushed\n" {
		t.Errorf("the pulled template's state: %q", got)
	}
	if live, err := lease.(drivers.ImageReporter).ImageIdentity(ctx); err != nil || live != id {
		t.Errorf("ImageIdentity of the pulled template's lease = %s, %v; want %s", live, err, id)
	}
	wantInUse(t, ctx, e, cfg, id, "a lease runs the pulled template")
	if err := remoteHas(id.String()); err != nil {
		t.Errorf("the registry lost the template after a refused delete: %v", err)
	}
	if _, err := lease.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	wantDeleted(t, ctx, e, cfg, id, id.String())
	if err := remoteHas(id.String()); err == nil {
		t.Errorf("the template is still in the registry after DeleteTemplate")
	}
}

// A template image that another repository tags (someone's docker tag) is
// used by that reference: the delete is refused with ErrInUse and neither
// tag goes.
func TestDeleteTemplateTaggedElsewhereIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(e.img.Ref, nil)
	id := captureFile(t, ctx, e, cfg, "tagged")
	removeImageAtCleanup(t, e, id.Digest())
	other := e.reg.Host + "/someone/else:" + e.run
	if err := e.cli.ImageTag(ctx, id.Digest(), other); err != nil {
		t.Fatal(err)
	}
	wantInUse(t, ctx, e, cfg, id, "another repository tags it")
	ins, err := e.cli.ImageInspect(ctx, id.Digest())
	if err != nil || len(ins.RepoTags) != 2 {
		t.Fatalf("the template after the refused delete: %v, tags %v; want both tags", err, ins.RepoTags)
	}
	if _, err := e.cli.ImageRemove(ctx, other, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	wantDeleted(t, ctx, e, cfg, id, id.Digest())
}

// A template captured from a sandbox of another template is built on it
// (the engine records the parent): deleting the parent first is refused
// with ErrInUse (a child image), and succeeds once the child is deleted;
// deleting the child removes only the child (noprune).
func TestDeleteTemplateWithAChildTemplate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(e.img.Ref, nil)
	parent := captureFile(t, ctx, e, cfg, "parent")
	removeImageAtCleanup(t, e, parent.Digest())
	child := captureFile(t, ctx, e, e.config(parent.String(), nil), "child")
	removeImageAtCleanup(t, e, child.Digest())

	wantInUse(t, ctx, e, cfg, parent, "a child template is built on it")
	wantDeleted(t, ctx, e, cfg, child, child.Digest())
	if _, err := e.cli.ImageInspect(ctx, parent.Digest()); err != nil {
		t.Fatalf("deleting the child took the parent: %v", err)
	}
	wantDeleted(t, ctx, e, cfg, parent, parent.Digest())
}
