package controller_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease"
)

// Acquire a lease for a runner, attach it, start a task whose output goes
// to this process's stdout, wait for its exit and release the lease. The
// fake driver runs the runner in this process (its tasks are real
// processes); a host passes real drivers and its berth stores.
func Example() {
	ctx := context.Background()
	fk := fake.New(nil)
	cfg, _ := fk.Schema().Normalize(map[string]any{"region": "local-1"})
	envs := envhook.NewMemoryStore().(environment.Store)
	_ = envs.CreateEnvironment(ctx, &environment.Environment{ID: "env-1", Name: "scratch", Driver: "fake", Status: environment.StatusActive, Config: cfg, Revision: 1}, false)
	reg := drivers.NewRegistry(fk)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, &envhook.Options{TestMode: true}).(*environment.Assignments)
	leases := lease.NewMemoryStore()
	signer, _ := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("k", 32))})
	dir, _ := os.MkdirTemp("", "berth-example-")
	defer os.RemoveAll(dir)
	c, tasks, err := controller.New(signer, leases, nil, &controller.Options{DataDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	mgr, _ := leasehook.New(leasehook.Sources{Store: leases, Drivers: reg, Assignments: asg, Tasks: tasks, Options: &lease.Options{InstanceID: "example"}})
	m := mgr.(*lease.Manager)
	defer leasehook.Close(m)
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

	// The lease names the runner binaries, one per architecture; it
	// records the one of its target's (the fake never executes it).
	runners := drivers.RunnerSetOf(drivers.RunnerSpec{Binary: "/opt/berth/berth-runner", SHA256: strings.Repeat("cd", 32), Arch: runtime.GOARCH})
	h, err := m.Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: "env-1", Run: "run-1", Runner: runners})
	if err != nil {
		fmt.Println(err)
		return
	}
	att, err := c.Attach(ctx, operator, h, controller.AttachRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	task, err := att.Start(ctx, operator, controller.TaskSpec{
		TaskStart: prp.TaskStart{Argv: []string{"sh", "-c", "echo hello from the task; exit 3"}},
		Stdout:    os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exit, err := task.Wait(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit", exit.Code)

	l, _ := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	fmt.Println(l.Status, l.Cleanup, l.CleanupEvidenceKind)
	// Output:
	// hello from the task
	// exit 3
	// released confirmed provider
}
