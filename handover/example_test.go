package handover_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/lease"
)

// An operator prepares the hand-over of a managed account to a company's
// projects on an environment's sandboxes; the host's Checker answers the
// project auth check. At dispatch the account goes through only for a
// lease of that environment and exactly those projects (AUTH-2); another
// project set is refused with a code naming what differs. Everything runs
// on memory stores.
func ExampleService_PrepareManagedAccount() {
	ctx := context.Background()
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}

	sys, err := berth.New(ctx, &berth.Options{
		Drivers:  []drivers.Driver{fake.New(nil)},
		TestMode: true, // the fake driver is for tests only
		// The host's project auth check: here, every project may.
		ProjectAuthChecker: everyProject{},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	// The host's secret store holds the managed account; berth keeps
	// only its reference.
	account, err := sys.Secrets().Put(ctx, "host", "account", "the account's credentials")
	if err != nil {
		fmt.Println(err)
		return
	}
	// A saved environment of the fake driver, bound to a workspace, and an
	// agent's lease of it.
	env, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "sbx", Driver: "fake"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = sys.Assignments().Set(ctx, operator, environment.Binding{BindingRef: environment.BindingRef{
		Kind: environment.BindingWorkspace, Company: "acme", Key: "ws"}, EnvironmentID: env.ID}, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := sys.Leases().Acquire(ctx, agent, lease.AcquireRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws"}, Run: "run-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{})

	svc := sys.Handover()
	rec, err := svc.PrepareManagedAccount(ctx, operator, "acme", account.String(), env.ID, []string{"web", "api"})
	fmt.Println(rec.Status, rec.Projects, err)

	// Before a task of the lease's runner asks for the account (Handle.Run
	// checks the same at dispatch).
	use := func(projects ...string) []lease.SecretUse {
		return []lease.SecretUse{{Source: lease.SecretFromManagedAccount, Ref: account.String(), File: "account.json", Projects: projects}}
	}
	fmt.Println(svc.Check(ctx, agent, "acme", h.ID(), use("api", "web")))
	err = svc.Check(ctx, agent, "acme", h.ID(), use("api", "web", "billing"))
	code := errcode.ReasonOf(err)
	fmt.Println(errors.Is(err, handover.ErrMismatch), code == "auth_check_projects", code)
	// Output:
	// succeeded [api web] <nil>
	// <nil>
	// true true auth_check_projects
}

// everyProject is a host's project auth check that lets every project
// use the account.
type everyProject struct{}

func (everyProject) CheckProjectAuth(context.Context, authz.Principal, handover.AuthCheck) (handover.Status, string, error) {
	return handover.StatusSucceeded, "", nil
}
