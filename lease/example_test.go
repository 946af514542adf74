package lease_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
)

func Example() {
	ctx := context.Background()
	fk := fake.New(nil)
	cfg, _ := fk.Schema().Normalize(map[string]any{"region": "local-1"})
	envs := environment.NewMemoryStore() // a host passes its store.Stores fields
	_ = envs.CreateEnvironment(ctx, &environment.Environment{ID: "env-1", Name: "scratch", Driver: "fake", Status: environment.StatusActive, Config: cfg, Revision: 1}, false)
	reg := drivers.NewRegistry(fk)
	asg := environment.NewAssignments(environment.NewMemoryBindingStore(), envs, reg, &environment.Options{TestMode: true})
	m, _ := lease.NewManager(lease.NewMemoryStore(), reg, asg, nil, &lease.Options{InstanceID: "example"})
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

	h, err := m.Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: "env-1", Run: "run-1", Policy: lease.ReuseByEnvironment})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ := h.Exec(ctx, lease.Command{Argv: []string{"echo", "hello"}})
	fmt.Print(string(res.Stdout))

	l, _ := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Stop})
	fmt.Println(l.Status, l.Cleanup, l.ReuseKey != "")

	// The next run resumes the stopped sandbox.
	h2, _ := m.Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: "env-1", Run: "run-2", Policy: lease.ReuseByEnvironment})
	fmt.Println(h2.ID() == h.ID(), h2.Resumed(), strings.HasPrefix(h2.SandboxID(), "fake-"))
	// Output:
	// hello
	// released confirmed true
	// true true true
}
