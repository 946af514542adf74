package berth_test

import (
	"context"
	"fmt"
	"os"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
)

// Example runs the README's host program (hostProgram, in
// hostprogram_test.go) on the fake driver: an operator saves an
// environment and binds a workspace to it; an agent leases it through its
// scope with a runner, runs a task, streams its output, stops it with
// proof and releases the lease.
func Example() {
	ctx := context.Background()
	sys, err := berth.New(ctx, &berth.Options{
		// Stores: db.Stores() of store/sqlite or store/postgres; none for memory stores.
		Drivers:  []drivers.Driver{fake.New(nil)},
		TestMode: true, // the fake driver is for tests only
		// No RunnerBinary: the runner is built from berth's source when a
		// lease first needs it (package runnerbin).
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	view, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "sandboxes", Driver: "fake"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = sys.Assignments().Set(ctx, operator, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Company: "acme", Key: "ws"}, EnvironmentID: view.ID}, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := hostProgram(ctx, sys, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// tests started
	// stopped: true, lease released confirmed
}
