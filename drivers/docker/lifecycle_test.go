package docker_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/errcode"
)

// psSleeps lists the sleep processes of the container other than the idle
// loop's.
func psSleeps(t *testing.T, ctx context.Context, sb drivers.Sandbox) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(run(t, ctx, sb, "ps", "-o", "pid,args"), "\n") {
		if strings.Contains(l, "sleep 30") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// waitSleeps polls ps inside the container until n test sleeps run.
func waitSleeps(t *testing.T, ctx context.Context, sb drivers.Sandbox, n int) {
	t.Helper()
	for len(psSleeps(t, ctx, sb)) < n {
		if ctx.Err() != nil {
			t.Fatalf("the sleeps did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A cancelled command leaves nothing running in the container: neither the
// command, nor its children, nor a child that left the process group.
func TestCancelledSleepLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	sb := e.acquire(ctx, e.config(e.img.Ref, nil), drivers.AcquireRequest{})

	t.Run("exec sleep 300", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := sb.Exec(cctx, drivers.Command{Argv: []string{"sleep", "300"}})
			done <- err
		}()
		waitSleeps(t, ctx, sb, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Exec after cancel: err = %v, want context.Canceled", err)
		}
		if left := psSleeps(t, ctx, sb); len(left) != 0 {
			t.Errorf("still running after cancel: %q", left)
		}
	})
	t.Run("stream a process tree, one child in its own session", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p, err := sb.(drivers.StreamExecer).Start(cctx, drivers.Command{Argv: []string{"sh", "-c",
			"sleep 301 & setsid sleep 302 & sleep 303"}}, nil, nil)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		waitSleeps(t, ctx, sb, 3)
		cancel()
		res, err := p.Wait(context.Background())
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Wait after cancel: err = %v, want context.Canceled", err)
		}
		if res == nil || res.Signal != "KILL" || res.ExitCode != -1 {
			t.Errorf("Wait after cancel: result %+v, want exit -1 signal KILL", res)
		}
		if left := psSleeps(t, ctx, sb); len(left) != 0 {
			t.Errorf("still running after cancel: %q", left)
		}
	})
}

// An exec'd command leads its own session and process group: the engine
// makes each exec'd process a session leader and the wrapper execs the
// command in its own place (no setsid of ours), so a cancellation's group
// kill reaches a child that cleared its environment (no marker). Under
// runc and runsc (issue 56: the wrapper that spares gVisor a fork).
func TestExecLeadsItsProcessGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	forRuntimes(t, e, func(t *testing.T, overrides map[string]any) {
		ctx := testCtx(t)
		sb := e.acquire(ctx, e.config(e.img.Ref, overrides), drivers.AcquireRequest{})
		// pid (comm) state ppid pgrp session ...
		if f := strings.Fields(run(t, ctx, sb, "cat", "/proc/self/stat")); len(f) < 6 || f[1] != "(cat)" || f[4] != f[0] || f[5] != f[0] {
			t.Fatalf("the exec'd command's stat %q: want it the leader of its process group and session", f)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := sb.Exec(cctx, drivers.Command{Argv: []string{"sh", "-c", "env -i sleep 306 & sleep 307"}})
			done <- err
		}()
		waitSleeps(t, ctx, sb, 2)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Exec after cancel: err = %v, want context.Canceled", err)
		}
		if left := psSleeps(t, ctx, sb); len(left) != 0 {
			t.Errorf("still running after cancel (the child without the marker was not in the command's group): %q", left)
		}
	})
}

// LEASE-9: a labelled container that no lease record owns is found by List
// and removed by Destroy; a container berth did not make is neither listed
// nor destroyed. LEASE-7: the destroy is confirmed, and a second one is
// harmless. The same under gVisor (issue 56: runtime runsc).
func TestOrphanIsListedAndDestroyed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	forRuntimes(t, e, func(t *testing.T, overrides map[string]any) { orphanIsListedAndDestroyed(t, e, overrides) })
}

func orphanIsListedAndDestroyed(t *testing.T, e *env, overrides map[string]any) {
	ctx := testCtx(t)
	cfg := e.config(e.img.Ref, overrides)
	// The instance label is the subtest's own: the runtimes' subtests run
	// at once on one engine.
	inst := "inst-" + e.run + "-" + filepath.Base(t.Name())
	labels := map[string]string{"berth.instance": inst, "berth.environment": "env-1"}
	orphan := e.acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lost-lease", Labels: labels}).ID()

	// A container with the same labels that berth did not make.
	foreign, err := e.cli.ContainerCreate(ctx, &container.Config{Image: e.img.Ref, Cmd: []string{"true"},
		Labels: map[string]string{"berth.instance": inst, "berth.environment": "env-1", runLabel: e.run}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}

	infos, err := e.drv.List(ctx, cfg, labels)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var ids []string
	for _, i := range infos {
		ids = append(ids, i.ProviderLeaseID)
		if i.State != drivers.StateRunning || i.Labels[docker.LabelLease] != "lost-lease" {
			t.Errorf("List entry %+v: want running, lease label, creation time", i)
		}
	}
	if diff := cmp.Diff([]string{orphan}, ids); diff != "" {
		t.Errorf("List(%v) (-want +got):\n%s", labels, diff)
	}

	if _, err := e.drv.Destroy(ctx, cfg, foreign.ID); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Destroy of a container berth did not make: err = %v, want ErrNotFound", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, foreign.ID); err != nil {
		t.Errorf("the foreign container was touched: %v", err)
	}

	for i := range 2 {
		r, err := e.drv.Destroy(ctx, cfg, orphan)
		if err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
		if !r.Proves(orphan, drivers.Destroy) || r.Evidence == "" {
			t.Errorf("Destroy #%d: receipt %+v does not prove the destroy", i+1, r)
		}
	}
	if _, err := e.cli.ContainerInspect(ctx, orphan); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect after destroy: err = %v, want not found", err)
	}
	if infos, err := e.drv.List(ctx, cfg, labels); err != nil || len(infos) != 0 {
		t.Errorf("List after destroy = %v, %v; want none", infos, err)
	}
}

// LEASE-7: the receipts say what the engine reports after the release.
func TestReleaseReceiptsMatchTheEngine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(e.img.Ref, nil)
	for _, disp := range []drivers.Disposition{drivers.Keep, drivers.Stop, drivers.Destroy} {
		sb := e.acquire(ctx, cfg, drivers.AcquireRequest{})
		r, err := sb.Release(ctx, disp)
		if err != nil {
			t.Fatalf("Release(%s): %v", disp, err)
		}
		ins, ierr := e.cli.ContainerInspect(ctx, sb.ID())
		var engine drivers.State
		switch {
		case cerrdefs.IsNotFound(ierr):
			engine = drivers.StateDestroyed
		case ierr != nil:
			t.Fatal(ierr)
		case ins.State.Running:
			engine = drivers.StateRunning
		default:
			engine = drivers.StateStopped
		}
		want := map[drivers.Disposition]drivers.State{drivers.Keep: drivers.StateRunning, drivers.Stop: drivers.StateStopped, drivers.Destroy: drivers.StateDestroyed}[disp]
		if r.State != want || engine != want || !r.Confirmed || r.ProviderLeaseID != sb.ID() {
			t.Errorf("Release(%s): receipt %+v, engine %s; want confirmed %s", disp, r, engine, want)
		}
		if !r.Proves(sb.ID(), disp) {
			t.Errorf("Release(%s): receipt does not prove it", disp)
		}
	}
}

// IMG-4: with capture_repository a capture is pushed and its identity is
// the registry's digest; acquiring it runs the captured state; deleting it
// removes it from the registry too.
func TestCapturePushesToTheRegistry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	repo := e.reg.Host + "/berth/templates"
	cfg := e.config(e.img.Ref, map[string]any{docker.FieldCaptureRepo: repo})
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "setup-lease"})
	run(t, ctx, sb, "sh", "-c", "echo prepared > /etc/berth-setup")
	id, err := sb.(drivers.Capturer).Capture(ctx, drivers.CaptureRequest{Name: "My Template!", Labels: map[string]string{"purpose": "test"}})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if id.Digest() == "" || id.Repository() != repo {
		t.Fatalf("Capture = %s, want a digest in %s", id, repo)
	}
	if err := remoteHas(id.String()); err != nil {
		t.Fatalf("captured manifest not in the registry: %v", err)
	}
	removeImageAtCleanup(t, e, id.String())
	ins, err := e.cli.ImageInspect(ctx, id.String())
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{docker.LabelTemplate: "my-template", "purpose": "test", docker.LabelManaged: "", docker.LabelLease: "", runLabel: e.run}
	gotLabels := map[string]string{}
	for k := range wantLabels {
		gotLabels[k] = ins.Config.Labels[k]
	}
	if diff := cmp.Diff(wantLabels, gotLabels); diff != "" {
		t.Errorf("captured image labels (-want +got):\n%s", diff)
	}

	from := e.acquire(ctx, e.config(id.String(), nil), drivers.AcquireRequest{})
	if got := run(t, ctx, from, "cat", "/etc/berth-setup"); got != "prepared\n" {
		t.Errorf("captured state: %q", got)
	}
	if live, err := from.(drivers.ImageReporter).ImageIdentity(ctx); err != nil || live != id {
		t.Errorf("ImageIdentity of the template's sandbox = %s, %v; want %s", live, err, id)
	}
	if _, err := from.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := e.drv.DeleteTemplate(ctx, cfg, id); err != nil {
			t.Fatalf("DeleteTemplate #%d: %v", i+1, err)
		}
	}
	if err := remoteHas(id.String()); err == nil {
		t.Errorf("the template is still in the registry after DeleteTemplate")
	}
	if _, err := e.cli.ImageInspect(ctx, id.String()); !cerrdefs.IsNotFound(err) {
		t.Errorf("the template is still in the engine after DeleteTemplate: %v", err)
	}
}
