package berth_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
)

// Issue 31 on Daytona (its fake API, following daytonaio/daytona
// v0.190.0's state rules): a pool of started sandboxes, labelled as
// members; an acquisition adopts one (same sandbox id, started, running
// commands); a restarted System adopts the other by resuming it by id; an
// archive drains the pool, a restore lets it refill, and the catalog's
// delete drains the rest: the provider holds no sandbox of the environment
// afterwards.
func TestPoolOnDaytona(t *testing.T) {
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
	stores := store.Memory()
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	newSys := func() *berth.System {
		drv := daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond,
			RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, CleanupTimeout: 10 * time.Second})
		sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{drv}, Stores: stores, Secrets: secrets, Leases: &lease.Options{ManualPoolRefill: true}})
		if err != nil {
			t.Fatal(err)
		}
		return sys
	}
	sys := newSys()
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "daytona-pool", Driver: "daytona", Config: map[string]any{
		"api_url": srv.URL(), "api_key": srv.APIKey(), "organization_id": srv.OrganizationID(),
		"snapshot_id": base.ID,
	}, Pool: &environment.Pool{Size: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := sys.Leases().MaintainPools(ctx, tplOps); err != nil || rep.Created != 2 {
		t.Fatalf("MaintainPools: %+v, %v", rep, err)
	}
	members := map[string]bool{}
	for _, sb := range srv.Sandboxes() {
		if sb.Labels["berth.pool"] != "member" || sb.Labels["berth.environment"] != env.ID || sb.State != "started" {
			t.Fatalf("member sandbox %s: %s, labels %v", sb.ID, sb.State, sb.Labels)
		}
		members[sb.ID] = true
	}
	if len(members) != 2 {
		t.Fatalf("%d member sandboxes, want 2", len(members))
	}
	adopt := func(sys *berth.System, run string) {
		t.Helper()
		h, err := sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: run})
		if err != nil {
			t.Fatal(err)
		}
		if !members[h.Lease().ProviderLeaseID] {
			t.Fatalf("run %s got sandbox %s, not a member", run, h.Lease().ProviderLeaseID)
		}
		delete(members, h.Lease().ProviderLeaseID)
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "echo adopted"}})
		if err != nil || string(res.Stdout) != "adopted\n" {
			t.Fatalf("exec: %+v, %v", res, err)
		}
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Fatal(err)
		}
	}
	adopt(sys, "r1")
	sys.Close() // drains nothing
	sys2 := newSys()
	defer sys2.Close()
	adopt(sys2, "r2")
	if rep, err := sys2.Leases().MaintainPools(ctx, tplOps); err != nil || rep.Created != 2 {
		t.Fatalf("refill: %+v, %v", rep, err)
	}
	// An archive drains the pool at once; a restore lets it refill.
	arch, err := sys2.Catalog().Archive(ctx, tplOps, env.ID, env.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if left := srv.Sandboxes(); len(left) != 0 {
		t.Fatalf("%d sandboxes left after the archive: %+v", len(left), left)
	}
	cur, err := sys2.Catalog().Restore(ctx, tplOps, env.ID, arch.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := sys2.Leases().MaintainPools(ctx, tplOps); err != nil || rep.Created != 2 {
		t.Fatalf("refill after the restore: %+v, %v", rep, err)
	}
	if _, err := sys2.Catalog().Delete(ctx, tplOps, env.ID, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if left := srv.Sandboxes(); len(left) != 0 {
		t.Fatalf("%d sandboxes left after the delete: %+v", len(left), left)
	}
}
