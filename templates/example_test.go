package templates_test

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
	"github.com/berthdev/berth/templates"
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
	fmt.Println("lease runs the template:", h.Lease().Labels["berth.template-id"] == tpl.ID)

	tpl, err = sys.Templates().Revoke(ctx, op, tpl.ID, templates.RevokeOptions{Delete: true})
	fmt.Println(tpl.State, tpl.DeleteWanted, err)
	for _, l := range []*lease.Handle{src, h} {
		_, _ = l.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
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

// An operator runs a scripted setup session: the steps run in a setup
// sandbox leased under the instance company, berth removes its own files,
// captures, destroys the sandbox with proof and promotes; the same script
// again is answered with that template and builds nothing. On the fake
// driver, which answers the setup's own scripts as a clean sandbox would.
func ExampleService_Setup() {
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
	script := `{"steps": [{"write": {"path": "/etc/motd", "mode": "0644", "content": "hi"}}, {"run": ["echo", "built"]}]}`
	ses, err := sys.Templates().Setup(ctx, op, templates.SetupRequest{Environment: env.ID, Name: "motd",
		Script: strings.NewReader(script), Promote: true})
	fmt.Println(ses.State, ses.LeaseCleanup, err)
	again, err := sys.Templates().Setup(ctx, op, templates.SetupRequest{Environment: env.ID, Script: strings.NewReader(script)})
	fmt.Println(again.State, again.Reused, again.Template == ses.Template, err)
	// Output:
	// promoted confirmed <nil>
	// promoted true true <nil>
}
