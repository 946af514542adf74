package instance_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
)

// Every known principal reads the instance settings; only instance admins
// and local operators change them, each change based on the revision it
// read. Admit is the decision the environment gate makes with them.
func ExampleService() {
	ctx := context.Background()
	sys, err := berth.New(ctx, nil) // memory stores; a host passes its own
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	svc := sys.Settings()
	admin := authz.Principal{ID: "admin", Role: authz.RoleInstanceAdmin}
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}

	s, err := svc.Get(ctx, agent)
	fmt.Println(s.EnableEnvironments, s.ManagedSandboxOnly, s.QuotaPerCompany, s.QuotaPerCompanyEnvironment, s.Revision, err)

	on := true
	s, err = svc.Update(ctx, admin, s.Revision, func(c *instance.Settings) error { c.ManagedSandboxOnly = on; return nil })
	fmt.Println(s.ManagedSandboxOnly, s.Revision, s.UpdatedBy, err)
	fmt.Println(s.Admit("docker", false))
	err = s.Admit("ssh", true) // a host driver
	fmt.Println(errors.Is(err, instance.ErrManagedSandboxOnly), err)

	// A change based on a stale revision is refused; an agent may not change them.
	off := false
	_, err = svc.Update(ctx, admin, 0, func(c *instance.Settings) error { c.EnableEnvironments = off; return nil })
	fmt.Println(errors.Is(err, errcode.ErrConflict))
	_, err = svc.Update(ctx, agent, instance.AnyRevision, func(c *instance.Settings) error { c.EnableEnvironments = off; return nil })
	fmt.Println(errors.Is(err, errcode.ErrDenied))
	// Output:
	// true false 8 4 0 <nil>
	// true 1 admin <nil>
	// <nil>
	// true driver "ssh" is a host driver and the instance setting enableManagedSandboxOnly is on (only managed sandboxes can be targets): managed_sandbox_only
	// true
	// true
}
