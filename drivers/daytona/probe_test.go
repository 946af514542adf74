package daytona_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/probehook"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/qualification"
)

// Issue #13 item 2, PRB-5: a probe of an environment whose pinned snapshot
// went inactive (reactivation off) fails with code image_inactive, not
// image_not_found.
func TestProbeReportsImageInactive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.srv.AgeSnapshot(e.snap.ID, daytonafake.SnapshotIdleLimit+time.Hour); err != nil {
		t.Fatal(err)
	}
	reg := drivers.NewRegistry(e.drv)
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	envs := envhook.NewMemoryStore().(environment.Store)
	cat := envhook.NewCatalog(envs, reg, secrets, nil, &envhook.Options{TestMode: true}).(*environment.Catalog)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, &envhook.Options{TestMode: true}).(*environment.Assignments)
	mgr, _ := leasehook.New(leasehook.Sources{Store: lease.NewMemoryStore(), Drivers: reg, Assignments: asg, Secrets: secrets.Get})
	leases := mgr.(*lease.Manager)
	p := probehook.New(probehook.Sources{Catalog: cat, Environments: envs, Drivers: reg, Leases: leases,
		Qualifications: qualification.NewMemoryStore(),
		Gate:           envhook.NewGate(reg, &envhook.Options{TestMode: true})}).(*probe.Prober)
	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	env, err := cat.Create(ctx, admin, environment.CreateRequest{Name: "daytona", Driver: "daytona", Config: map[string]any{
		"api_url": e.srv.URL(), "api_key": e.srv.APIKey(), "snapshot_id": e.snap.ID,
		daytona.FieldReactivateSnapshot: false,
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Probe(ctx, admin, env.ID, probe.Request{Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.ImageInactive {
		t.Errorf("probe of an inactive snapshot: ok %v code %s, want %s", res.OK, res.Code, reason.ImageInactive)
	}
}
