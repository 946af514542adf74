package custom_test

import (
	"context"
	"fmt"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/images/custom"
	"github.com/berthdev/berth/lease"
)

// An operator captures a lease of an environment, promotes the template
// (leases now start from it), and revokes it with deletion, which waits
// for the lease that still uses it; the sweep deletes it afterwards. On
// the fake driver.
func ExampleService() {
	ctx := context.Background()
	fk := fake.New(nil)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fk}, TestMode: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	op := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	env, err := sys.Catalog().Create(ctx, op, environment.CreateRequest{Name: "sandboxes", Driver: fk.Name(),
		Config: map[string]any{"image": fk.DefaultImageIdentity().String()}})
	if err != nil {
		fmt.Println(err)
		return
	}
	acquire := func() *lease.Handle {
		h, err := sys.Leases().Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID})
		if err != nil {
			panic(err)
		}
		return h
	}
	src := acquire()
	tpl, err := sys.Templates().Capture(ctx, op, src.ID(), "with tools")
	fmt.Println(tpl.State, err)
	tpl, err = sys.Templates().Promote(ctx, op, tpl.ID)
	fmt.Println(tpl.State, err)
	v, _ := sys.Catalog().Get(ctx, op, env.ID)
	fmt.Println("drift:", v.ActiveTemplate.Drift)

	h := acquire() // starts from the template
	id, _ := h.ImageIdentity(ctx)
	fmt.Println("lease runs the template:", id.String() == tpl.Identity)

	tpl, err = sys.Templates().Revoke(ctx, op, tpl.ID, custom.RevokeOptions{Delete: true})
	fmt.Println(tpl.State, tpl.DeleteWanted, err)
	for _, l := range []*lease.Handle{src, h} {
		_, _ = l.Release(ctx, lease.ReleaseOptions{Disposition: drivers.Destroy})
	}
	n, err := sys.Templates().Sweep(ctx, op)
	fmt.Println("deleted:", n, err)
	// Output:
	// captured <nil>
	// active <nil>
	// drift: relinked
	// lease runs the template: true
	// revoked true <nil>
	// deleted: 1 <nil>
}
