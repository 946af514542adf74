package store_test

import (
	"context"
	"fmt"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/store"
)

// A host that keeps one package's records in a store of its own fills the
// other fields from Memory: berth.New refuses a Stores with some fields
// set and others nil, naming the nil ones (Missing), so that a durable
// store never sits beside a memory store nobody asked for.
func ExampleMemory() {
	ctx := context.Background()
	settings := instance.NewMemoryStore() // stands for the host's own instance.Store

	partial := store.Stores{Settings: settings}
	fmt.Println(partial.Missing())
	_, err := berth.New(ctx, &berth.Options{Stores: partial, Drivers: []drivers.Driver{fake.New(nil)}, TestMode: true})
	fmt.Println(err)

	stores := store.Memory()
	stores.Settings = settings
	fmt.Println(stores.Missing())
	sys, err := berth.New(ctx, &berth.Options{Stores: stores, Drivers: []drivers.Driver{fake.New(nil)}, TestMode: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	s, err := sys.Settings().Get(ctx, authz.Principal{ID: "ops", Role: authz.RoleLocalOperator})
	fmt.Println(s.EnableEnvironments, s.Revision, err)
	// Output:
	// [Environments Bindings Health SecretUses Qualifications Leases AuthChecks Runners Templates Workspaces]
	// berth: Options.Stores sets some stores and leaves Stores.Environments, Stores.Bindings, Stores.Health, Stores.SecretUses, Stores.Qualifications, Stores.Leases, Stores.AuthChecks, Stores.Runners, Stores.Templates, Stores.Workspaces nil: set every field (store.Memory() for the ones kept in memory), or none for memory stores
	// []
	// true 0 <nil>
}
