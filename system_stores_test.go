package berth_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
)

// Issue 25 item 1: a Stores with a durable store and nil fields is refused,
// naming every nil field; an empty one composes memory stores; a full one
// is used as given (a record written through the System is in the host's
// store).
func TestNewStores(t *testing.T) {
	ctx := context.Background()
	durable := openStores(t, "sqlite://"+filepath.Join(t.TempDir(), "berth.db"))
	partial := store.Stores{Leases: durable.Leases, Environments: durable.Environments}
	_, err := berth.New(ctx, &berth.Options{Stores: partial})
	if err == nil {
		t.Fatal("New with Leases and Environments only succeeded; want an error naming the nil stores")
	}
	for _, f := range []string{"Stores.Runners", "Stores.Bindings", "Stores.Health", "Stores.SecretUses", "Stores.Qualifications", "Stores.AuthChecks"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
	if strings.Contains(err.Error(), "Stores.Leases") {
		t.Errorf("error %q names Stores.Leases, which is set", err)
	}

	// Explicitly in memory: the rest from store.Memory().
	mixed := store.Memory()
	mixed.Leases = durable.Leases
	sys, err := berth.New(ctx, &berth.Options{Stores: mixed})
	if err != nil {
		t.Fatalf("New with every field set: %v", err)
	}
	defer sys.Close()

	// Issue 49: durable stores with no secret store are refused, naming
	// Options.Secrets; the host's store, or memory secrets asked for by
	// name, are taken.
	if !durable.Durable || store.Memory().Durable {
		t.Fatalf("Durable: SQL %t, memory %t; want true, false", durable.Durable, store.Memory().Durable)
	}
	if sys, err := berth.New(ctx, &berth.Options{Stores: durable}); err == nil || !strings.Contains(err.Error(), "Options.Secrets") {
		if sys != nil {
			sys.Close()
		}
		t.Fatalf("New with durable stores and no Secrets: %v; want an error naming Options.Secrets", err)
	}
	withSecrets, err := berth.New(ctx, &berth.Options{Stores: durable, Secrets: envhook.NewMemorySecretStore().(environment.SecretStore)})
	if err != nil {
		t.Fatalf("New with durable stores and the host's Secrets: %v", err)
	}
	withSecrets.Close()
	sys2, err := berth.New(ctx, &berth.Options{Stores: durable, MemorySecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys2.Close()
	op := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	v, err := sys2.Catalog().Create(ctx, op, environment.CreateRequest{Name: "here", Driver: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := durable.Environments.GetEnvironment(ctx, v.ID); err != nil {
		t.Errorf("the environment created through the System is not in the host's store: %v", err)
	}
	if ls, err := durable.Leases.ListLeases(ctx, lease.Filter{}); err != nil || len(ls) != 0 {
		t.Errorf("ListLeases of the host's store = %v, %v", ls, err)
	}
}

// Issue 25 item 1: the default drivers are local only; the fake is named
// by the hosts that want it.
func TestDefaultDriversAreLocalOnly(t *testing.T) {
	sys, err := berth.New(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if infos := sys.Drivers().List(); len(infos) != 1 || infos[0].Name != "local" {
		t.Errorf("default drivers %+v, want local only", infos)
	}
}
