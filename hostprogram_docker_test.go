package berth_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// Issue 49: the README's host program (hostProgram, the root Example's on
// the fake) runs unchanged against the real Docker engine with the real
// runner binary: acquire through a scope with a runner, run, stream, stop
// with proof, release. No live lease is left, and the container is gone.
func TestHostProgramOnDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli, img, run := dockerRig(t)
	stores := store.Memory()
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, Stores: stores, RunnerBinary: testenv.RunnerBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "host-program", Driver: "docker",
		Config: map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Assignments().Set(ctx, ops, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Company: "acme", Key: "ws"},
		EnvironmentID: env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := hostProgram(ctx, sys, &out); err != nil {
		t.Fatalf("host program: %v (output %q)", err, out.String())
	}
	if want := "tests started\nstopped: true, lease released confirmed\n"; out.String() != want {
		t.Errorf("host program printed %q, want %q", out.String(), want)
	}
	ls, err := stores.Leases.ListLeases(ctx, lease.Filter{Environment: env.ID})
	if err != nil || len(ls) != 1 || ls[0].Status != lease.StatusReleased || ls[0].Cleanup != "confirmed" || ls[0].Runner == nil {
		t.Fatalf("lease records %+v, %v; want one released with proof, acquired with a runner", ls, err)
	}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "test.berth/run="+run))})
	if err != nil || len(cs) != 0 {
		t.Errorf("containers left: %d, %v", len(cs), err)
	}
}

// Issue 49 item 1: a secret of the environment's config reaches a task
// started with Handle.Run as the variable it names, on the real Docker
// engine with the real runner; a reference the environment does not have
// starts nothing.
func TestRunSecretEnvOnDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, img, run := dockerRig(t)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, RunnerBinary: testenv.RunnerBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "secret-env", Driver: "docker",
		Config: map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run},
			"env": map[string]any{"TOKEN": "token-canary"}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, ops, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, WithRunner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{})
	task, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", `echo "got $GH_TOKEN"`},
		Secrets: []lease.SecretUse{{Source: lease.SecretFromEnvironment, Ref: "TOKEN", Env: "GH_TOKEN"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(task.Stream(ctx))
	if err != nil || string(b) != "got token-canary\n" {
		t.Errorf("the task printed %q, %v", b, err)
	}
	_, err = h.Run(ctx, lease.Command{Argv: []string{"true"}, Secrets: []lease.SecretUse{{Source: lease.SecretFromEnvironment, Ref: "OTHER", Env: "OTHER"}}})
	if errcode.ReasonOf(err) != "secret_unknown" {
		t.Errorf("a secret the environment has not: %v, want reason secret_unknown", err)
	}
	if l, err := h.Release(ctx, lease.ReleaseOptions{}); err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Errorf("release: %+v, %v", l, err)
	}
}
