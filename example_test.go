package berth_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
)

// Example mirrors the README's "Composing berth": an operator saves an
// environment and binds a workspace to it; an agent leases it through its
// scope's binding (berth resolves the binding itself), and the operator
// leases it by environment id. It runs on the fake driver.
func Example() {
	ctx := context.Background()
	sys, err := berth.New(ctx, &berth.Options{
		// Stores: db.Stores() of store/sqlite or store/postgres; none for memory stores.
		Drivers:  []drivers.Driver{fake.New(nil)},
		TestMode: true, // the fake driver is for tests only
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}

	view, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "sandboxes", Driver: "fake"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = sys.Assignments().Set(ctx, operator, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws"}, Company: "acme", EnvironmentID: view.ID}, 0)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Through a scope: the way agents lease.
	h, err := sys.Leases().Acquire(ctx, agent, lease.AcquireRequest{
		Scope:    &authz.Scope{Company: "acme", Workspace: "ws"},
		Required: drivers.NewSet(drivers.CapExec),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := h.Exec(ctx, drivers.Command{Argv: []string{"echo", "hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(out.Stdout))
	l, err := sys.Leases().Release(ctx, agent, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	fmt.Println(l.Status, l.Cleanup, err)

	// By environment id: instance admins and local operators.
	h, err = sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: view.ID})
	fmt.Println(h.Lease().Environment == view.ID, err)
	l, err = sys.Leases().Release(ctx, operator, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	fmt.Println(l.Status, l.Cleanup, err)

	// An agent may not lease by id.
	_, err = sys.Leases().Acquire(ctx, agent, lease.AcquireRequest{Company: "acme", EnvironmentID: view.ID})
	fmt.Println(errors.Is(err, authz.ErrDenied))
	// Output:
	// hello
	// released confirmed <nil>
	// true <nil>
	// released confirmed <nil>
	// true
}
