package berth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/templates"
)

// requireRunscEngine ends the test unless the engine lists gVisor's runsc
// runtime (make prereqs registers it: internal/cmd/dockerruntime).
func requireRunscEngine(t testing.TB, cli *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := cli.Info(ctx)
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	if _, ok := info.Runtimes["runsc"]; !ok {
		testenv.Missing(t, "gVisor's runsc runtime in the Docker engine", "make prereqs installs Debian's runsc and registers it (internal/cmd/dockerruntime)", nil)
	}
}

// dockerRunscTarget is dockerTarget under gVisor (issue 56): the runner
// reaches its unix-socket ingress through runsc's --host-uds=open.
func dockerRunscTarget(t testing.TB) realTarget {
	tg := dockerTarget(t)
	requireRunscEngine(t, testenv.Docker(t))
	tg.config["runtime"] = "runsc"
	return tg
}

// Issue 56 on the real engine: a lease under runsc (the task sees gVisor's
// kernel, not the engine's) writes a file; capture and promote; a lease of
// the template, under runsc too, reads the file and reports the template's
// identity; revoke with deletion removes the image. gVisor's root overlay
// is off (--overlay2=none, internal/cmd/dockerruntime), so docker commit
// sees the container's writes.
func TestTemplateCaptureUnderRunsc(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cli := testenv.Docker(t)
	requireRunscEngine(t, cli)
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
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "tpl-runsc", Driver: "docker", Config: map[string]any{
		"image": img.Ref, "network": "none", "runtime": "runsc", "labels": map[string]any{"test.berth/run": run}}})
	if err != nil {
		t.Fatal(err)
	}
	if env.Isolation != drivers.IsolationGVisor {
		t.Errorf("the environment's isolation is %s, want gvisor", env.Isolation)
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
	info, err := cli.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	svc := sys.Templates()
	src := w.acquire(t, lease.Ephemeral)
	if k := exec(src, "uname -r"); k == info.KernelVersion {
		t.Errorf("a task under runsc sees the engine's kernel %s", k)
	}
	exec(src, "echo captured-under-gvisor > /tpl-marker")
	tpl, err := svc.Capture(ctx, tplOps, src.ID(), "issue 56")
	if err != nil {
		t.Fatalf("Capture under runsc: %v", err)
	}
	w.release(t, src, lease.Destroy)
	if _, err := svc.Promote(ctx, tplOps, tpl.ID); err != nil {
		t.Fatal(err)
	}
	h := w.acquire(t, lease.Ephemeral)
	if got := exec(h, "cat /tpl-marker"); got != "captured-under-gvisor" {
		t.Errorf("a lease of the template reads %q from the captured file", got)
	}
	if got := w.identity(t, h); got != tpl.Identity {
		t.Errorf("a lease of the template reports %s, want %s", got, tpl.Identity)
	}
	ins, err := cli.ContainerInspect(ctx, h.Lease().ProviderLeaseID)
	if err != nil || ins.HostConfig == nil || ins.HostConfig.Runtime != "runsc" {
		t.Errorf("the template's lease: inspect %v, runtime %+v; want runsc", err, ins.HostConfig)
	}
	w.release(t, h, lease.Destroy)
	tpl, err = svc.Revoke(ctx, tplOps, tpl.ID, templates.RevokeOptions{Delete: true})
	if err != nil || tpl.State != templates.StateDeleted || tpl.DeleteReceipt == nil || !tpl.DeleteReceipt.Confirmed {
		t.Errorf("revoke with deletion: %+v, %v", tpl, err)
	}
}

// Issue 56, CAP-1, CAP-3: a saved runtime the engine does not list makes
// the environment unavailable once its provider health is measured, with
// a reason naming the runtimes the engine has; saving it did no I/O, and
// an acquisition is refused without creating a container. An environment
// of the same engine without a runtime keeps its own health (available).
func TestDockerRuntimeMissingIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cli, img, run := dockerRig(t)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	labels := map[string]any{"test.berth/run": run}
	missing, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "no-such-runtime", Driver: "docker", Config: map[string]any{
		"image": img.Ref, "network": "none", "runtime": "berth-no-such-runtime", "labels": labels}})
	if err != nil {
		t.Fatalf("saving an environment of a runtime the engine lacks (no I/O at validation): %v", err)
	}
	plain, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "default-runtime", Driver: "docker", Config: map[string]any{
		"image": img.Ref, "network": "none", "labels": labels}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Catalog().RefreshAllHealth(ctx, tplOps); err != nil {
		t.Fatal(err)
	}
	info, err := cli.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := sys.Catalog().Get(ctx, tplOps, missing.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Health == nil || v.Health.Status != environment.HealthUnavailable || v.Unavailable == "" {
		t.Fatalf("an environment of a missing runtime: health %+v, unavailable %q; want unavailable", v.Health, v.Unavailable)
	}
	for name := range info.Runtimes {
		if !strings.Contains(v.Health.Reason, name) {
			t.Errorf("the reason %q does not name the engine's runtime %q", v.Health.Reason, name)
		}
	}
	if p, err := sys.Catalog().Get(ctx, tplOps, plain.ID); err != nil || p.Health == nil || p.Health.Status == environment.HealthUnavailable {
		t.Errorf("the same engine without a runtime: %+v, %v; want its own, available health", p.Health, err)
	}
	_, err = sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: missing.ID})
	if err == nil {
		t.Fatal("an acquisition of a runtime the engine lacks succeeded")
	}
	list, lerr := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "test.berth/run="+run))})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(list) != 0 {
		t.Errorf("the refused acquisition (%v) left %d containers", err, len(list))
	}
	if !strings.Contains(err.Error(), `"berth-no-such-runtime"`) {
		t.Errorf("the refusal %v does not name the runtime", err)
	}
}
