package berth_test

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
)

// Issue 31 on the real Docker engine: a pool of 2 is filled with running
// containers labelled as members (no env baked in: secret env vars go to
// each exec); an acquisition adopts one (the lease's id and container are
// the member's, its labels stay true) and execs in it; a second System on
// the same store (a restart: Close drained nothing) adopts the other by
// resuming it by id; the catalog's delete drains what is left, with
// receipts, and no container of the run is left.
func TestPoolOnDocker(t *testing.T) {
	ctx := context.Background()
	cli, img, run := dockerRig(t)
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	stores := store.Memory()
	newSys := func() *berth.System {
		// Refills only in MaintainPools, so that its report counts every
		// member (a save or an adoption would start one in the background).
		sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, Stores: stores, Leases: &lease.Options{ManualPoolRefill: true}})
		if err != nil {
			t.Fatal(err)
		}
		return sys
	}
	sys := newSys()
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "pool-docker", Driver: "docker",
		Config: map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}},
		Pool:   &environment.Pool{Size: 2}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sys.Leases().MaintainPools(ctx, ops)
	if err != nil || rep.Created != 2 {
		t.Fatalf("MaintainPools: %+v, %v", rep, err)
	}
	members := func() []container.Summary {
		t.Helper()
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", "test.berth/run="+run), filters.Arg("label", "berth.pool"+"=member"))})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	cs := members()
	if len(cs) != 2 {
		t.Fatalf("%d member containers, want 2", len(cs))
	}
	for _, c := range cs {
		ins, err := cli.ContainerInspect(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !ins.State.Running || ins.Config.Labels["berth.environment"] != env.ID || ins.Config.Labels["berth.lease"] == "" {
			t.Fatalf("member container %s: running %v, labels %v", c.ID, ins.State.Running, ins.Config.Labels)
		}
	}
	h, err := sys.Leases().Acquire(ctx, ops, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	l := h.Lease()
	ins, err := cli.ContainerInspect(ctx, l.ProviderLeaseID)
	if err != nil || ins.Config.Labels["berth.lease"] != l.ID || ins.Config.Labels["berth.pool"] != "member" {
		t.Fatalf("the adopted lease %s runs in container %s labelled %v (%v)", l.ID, l.ProviderLeaseID, ins.Config.Labels, err)
	}
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "echo adopted"}})
	if err != nil || string(res.Stdout) != "adopted\n" {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	// Close drains nothing: a new System adopts the other member by id.
	sys.Close()
	sys2 := newSys()
	defer sys2.Close()
	h2, err := sys2.Leases().Acquire(ctx, ops, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	adopted := false
	for _, c := range cs {
		adopted = adopted || c.ID == h2.Lease().ProviderLeaseID
	}
	if !adopted {
		t.Fatalf("the restarted System made container %s instead of adopting a member", h2.Lease().ProviderLeaseID)
	}
	if _, err := h2.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	// Refill after the adoptions, then delete: the drain destroys every
	// member with a receipt.
	if _, err := sys2.Leases().MaintainPools(ctx, ops); err != nil {
		t.Fatal(err)
	}
	radius, err := sys2.Catalog().BlastRadius(ctx, ops, env.ID)
	if err != nil || len(radius.PooledLeases) == 0 || !radius.Deletable() {
		t.Fatalf("blast radius: %+v, %v; want pooled leases, deletable", radius, err)
	}
	cur, err := sys2.Catalog().Get(ctx, ops, env.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys2.Catalog().Delete(ctx, ops, env.ID, cur.Revision); err != nil {
		t.Fatal(err)
	}
	sys2.Close() // waits for refills still running
	if _, err := sys2.Leases().Sweep(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if left := members(); len(left) != 0 {
		t.Fatalf("%d member containers left after the delete and a sweep", len(left))
	}
	ls, err := stores.Leases.ListLeases(ctx, lease.Filter{Statuses: []lease.Status{lease.StatusPooled}})
	if err != nil || len(ls) != 0 {
		t.Fatalf("pooled records left: %v, %v", ls, err)
	}
}
