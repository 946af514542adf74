package lease_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
)

// A host gets its lease manager from berth.New (System.Leases): acquire a
// reusable lease, run a command, stop it, and resume it in the next run.
func Example() {
	ctx := context.Background()
	sys, err := berth.New(ctx, &berth.Options{
		// Stores: db.Stores() of store/sqlite or store/postgres; none for memory stores.
		Drivers:  []drivers.Driver{fake.New(nil)},
		TestMode: true, // the fake driver is for tests only
		Leases:   &lease.Options{InstanceID: "example"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	env, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "scratch", Driver: "fake", Config: map[string]any{"region": "local-1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	m := sys.Leases()

	h, err := m.Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: "run-1", Policy: lease.ReuseByEnvironment})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ := h.Exec(ctx, lease.Command{Argv: []string{"echo", "hello"}})
	fmt.Print(string(res.Stdout))

	l, _ := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Stop})
	fmt.Println(l.Status, l.Cleanup, l.ReuseKey != "")

	// The next run resumes the stopped sandbox.
	h2, _ := m.Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: "run-2", Policy: lease.ReuseByEnvironment})
	fmt.Println(h2.ID() == h.ID(), h2.Resumed(), strings.HasPrefix(h2.SandboxID(), "fake-"))
	// Output:
	// hello
	// released confirmed true
	// true true true
}
