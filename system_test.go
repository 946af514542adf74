package berth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
)

// TestSystemWiring: New composes the catalog with the lease manager and the
// assignments, so a delete shows their references (CFG-7), is refused while
// a reusable lease lives, and clears bindings once allowed (ASG-5).
func TestSystemWiring(t *testing.T) {
	ctx := context.Background()
	fk := fake.New(nil)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fk}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	op := environment.Principal{ID: "ops", Role: environment.RoleLocalOperator}

	v, err := sys.Catalog.Create(ctx, op, environment.CreateRequest{
		Name: "sbx", Driver: fk.Name(), Config: map[string]any{"image": fk.DefaultImageIdentity().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Assignments.Set(ctx, op, environment.SetBinding{
		Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme", EnvironmentID: v.ID,
	}); err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases.Acquire(ctx, op, lease.AcquireRequest{
		Scope: &environment.Scope{Company: "acme", Workspace: "ws_1"}, Required: drivers.NewSet(drivers.CapExec),
		Run: "r1", Policy: lease.ReuseByEnvironment,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Leases.Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: drivers.Stop}); err != nil {
		t.Fatal(err)
	}

	br, err := sys.Catalog.BlastRadius(ctx, op, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(br.Assignments) != 1 || len(br.ReusableLeases) != 1 || br.Deletable() {
		t.Fatalf("blast radius = %+v; want one binding, one reusable lease, not deletable", br)
	}
	if _, err := sys.Catalog.Delete(ctx, op, v.ID, br.Revision); !errors.Is(err, environment.ErrConflict) {
		t.Fatalf("delete with a reusable lease: %v, want ErrConflict", err)
	}

	// Destroying the sandbox ends the reusable lease; the delete then goes
	// through and takes the binding with it.
	if _, err := sys.Leases.Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: drivers.Destroy}); err != nil {
		t.Fatal(err)
	}
	br, err = sys.Catalog.BlastRadius(ctx, op, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !br.Deletable() {
		t.Fatalf("blast radius after destroy = %+v; want deletable", br)
	}
	if _, err := sys.Catalog.Delete(ctx, op, v.ID, br.Revision); err != nil {
		t.Fatal(err)
	}
	_, err = sys.Assignments.Resolve(ctx, op, environment.Scope{Company: "acme", Workspace: "ws_1"}, 0)
	if !errors.Is(err, environment.ErrNotFound) {
		t.Fatalf("resolve after delete: %v, want no binding (ErrNotFound)", err)
	}
}
