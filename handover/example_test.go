package handover_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/prp"
	"github.com/berthdev/berth/prp/controller"
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

	// The host's secret store holds the managed account; berth keeps
	// only its reference.
	secrets := environment.NewMemorySecretStore()
	account, err := secrets.Put(ctx, "host", "account", "the account's credentials")
	if err != nil {
		fmt.Println(err)
		return
	}
	// A saved environment of the fake driver and a lease of it.
	envs := environment.NewMemoryStore()
	env := &environment.Environment{ID: "env_1", Name: "sbx", Driver: "fake", Status: environment.StatusActive, Config: config.Config{}, Revision: 1}
	if err := envs.CreateEnvironment(ctx, env, false); err != nil {
		fmt.Println(err)
		return
	}
	reg := drivers.NewRegistry(fake.New(nil))
	drv, _ := reg.Lookup("fake")
	fp, err := lease.EnvironmentFingerprint(drv, env)
	if err != nil {
		fmt.Println(err)
		return
	}
	leases := lease.NewMemoryStore()
	_, err = leases.InsertLease(ctx, &lease.Lease{ID: "lease_1", Company: "acme", Environment: "env_1", Run: "run-1",
		Status: lease.StatusActive, Policy: lease.Ephemeral, Provider: "fake", Fingerprint: fp, Config: env.Config.Clone(), AcquiredAt: time.Now()})
	if err != nil {
		fmt.Println(err)
		return
	}

	svc, resolver, err := handover.New(handover.Sources{Checks: handover.NewMemoryStore(), Environments: envs, Drivers: reg, Leases: leases, Secrets: secrets},
		&handover.Options{Checker: handover.CheckerFunc(func(_ context.Context, _ handover.CheckRequest) (handover.Result, error) {
			// The host's project auth check: here, every project may.
			return handover.Result{Succeeded: true}, nil
		})})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, err := svc.PrepareManagedAccount(ctx, operator, "acme", account.String(), "env_1", []string{"web", "api"})
	fmt.Println(rec.Status, rec.Projects, err)

	// At dispatch: a task of the lease's runner asks for the account.
	target := controller.SecretTarget{Session: "s_1", Lease: "lease_1", Run: "run-1", Company: "acme"}
	use := func(projects ...string) []prp.SecretUse {
		return []prp.SecretUse{{Source: prp.SecretFromManagedAccount, Ref: account.String(), File: "account.json", Projects: projects}}
	}
	fmt.Println(svc.Check(ctx, agent, target, use("api", "web")))
	// At delivery, the controller asks the resolver New returned (no
	// method of the Service) for the values.
	vals, err := resolver.Resolve(ctx, target, use("api", "web"))
	fmt.Println(len(vals), err)
	err = svc.Check(ctx, agent, target, use("api", "web", "billing"))
	code := controller.CodeOfSecrets(err)
	fmt.Println(errors.Is(err, handover.ErrMismatch), code == "auth_check_projects", code)
	// Output:
	// succeeded [api web] <nil>
	// <nil>
	// 1 <nil>
	// true true auth_check_projects
}
