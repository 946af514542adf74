package berth_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// TestSecretsOutliveTheirLeases: a secret version that a lease uses stays
// in the SecretStore after the environment's update supersedes it or its
// delete gives it up, until another System's cleanup of that lease is
// proven; then it is deleted (CFG-7, LEASE-6, LEASE-9; issue 11 item 1).
func TestSecretsOutliveTheirLeases(t *testing.T) {
	for _, change := range []string{"rotate", "delete"} {
		t.Run(change, func(t *testing.T) {
			ctx := context.Background()
			const key = "k-original-1234"
			fk := fake.New(&fake.Options{APIKey: key})
			secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
			url := "sqlite://" + filepath.Join(t.TempDir(), "berth.db")
			open := func() *berth.System {
				sys, err := berth.New(ctx, &berth.Options{Stores: openStores(t, url), Drivers: []drivers.Driver{fk}, TestMode: true, Secrets: secrets})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sys.Close() })
				return sys
			}
			a, b := open(), open()
			op := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
			v, err := a.Catalog().Create(ctx, op, environment.CreateRequest{Name: "sbx", Driver: fk.Name(),
				Config: map[string]any{"image": fk.DefaultImageIdentity().String(), "api_key": key}})
			if err != nil {
				t.Fatal(err)
			}
			h, err := a.Leases().Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			pid := h.SandboxID()
			ref, ok := h.Lease().Config.SecretRef("api_key")
			if !ok {
				t.Fatalf("lease config holds no api_key reference")
			}

			switch change {
			case "rotate":
				cfg := map[string]any{"image": fk.DefaultImageIdentity().String(), "api_key": "k-rotated-5678"}
				if _, err := a.Catalog().Update(ctx, op, v.ID, environment.UpdateRequest{BaseRevision: v.Revision, Config: cfg}); err != nil {
					t.Fatal(err)
				}
			case "delete":
				br, err := a.Catalog().BlastRadius(ctx, op, v.ID)
				if err != nil {
					t.Fatal(err)
				}
				if len(br.ActiveLeases) != 1 || !br.Deletable() {
					t.Fatalf("blast radius = %+v; want the active lease listed, deletable", br)
				}
				if _, err := a.Catalog().Delete(ctx, op, v.ID, br.Revision); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := secrets.Get(ctx, ref); err != nil {
				t.Fatalf("the secret version the live lease uses is gone after the %s: %v", change, err)
			}

			// The release fails unproven, so the lease waits for a sweep;
			// the sweep runs in the other System (another process).
			fakectl.Of(fk).RefuseStop(pid, errors.New("provider busy"))
			if _, err := a.Leases().Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy}); !errors.Is(err, lease.ErrCleanupPending) {
				t.Fatalf("Release with a refused destroy: %v, want ErrCleanupPending", err)
			}
			fakectl.Of(fk).ClearFaults()
			if _, err := secrets.Get(ctx, ref); err != nil {
				t.Fatalf("the secret of a lease pending cleanup is gone: %v", err)
			}
			rep, err := b.Leases().Sweep(ctx, op)
			// The fake accepts the original key only, so after a rotation
			// the orphan search with the environment's current config is
			// refused (and reported); the lease's cleanup uses the version
			// recorded on the lease.
			if err != nil && !(change == "rotate" && errors.Is(err, drivers.ErrAuth)) {
				t.Fatalf("Sweep: %v", err)
			}
			if rep.CleanedUp != 1 || rep.StillPending != 0 {
				t.Fatalf("sweep report %+v; want the pending cleanup proven", rep)
			}
			if st, _ := fakectl.Of(fk).State(pid); st != drivers.StateDestroyed {
				t.Errorf("sandbox %s after the sweep, want destroyed", st)
			}
			l, err := b.Leases().Get(ctx, op, h.ID())
			if err != nil || l.Cleanup != "confirmed" {
				t.Fatalf("lease after the sweep: %+v, %v; want cleanup confirmed", l, err)
			}
			if _, err := secrets.Get(ctx, ref); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("the retired secret version after its last lease was proven clean: %v, want deleted (ErrNotFound)", err)
			}
		})
	}
}
