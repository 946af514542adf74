package berth_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
)

// CFG-9 through the root: New wires the settings service over
// Stores.Settings (SQLite and PostgreSQL here) into the gate of the
// catalog, the assignments (and so the lease manager) and the prober.
func TestSystemInstanceSettings(t *testing.T) {
	t.Parallel()
	for _, db := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "berth.db") }},
		{"postgres", func(t *testing.T) string { return testenv.Postgres(t) }},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			systemSettingsOn(t, db.url(t))
		})
	}
}

func systemSettingsOn(t *testing.T, url string) {
	ctx := context.Background()
	st := openStores(t, url)
	fk := fake.New(&fake.Options{Isolation: drivers.IsolationContainer})
	bare := fake.New(&fake.Options{Name: "bare"}) // a sandbox driver that declares no isolation
	sys, err := berth.New(ctx, &berth.Options{Stores: st, Drivers: []drivers.Driver{fk, local.New(nil), bare}, TestMode: true, MemorySecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	board := authz.Principal{ID: "bob", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	off, on := false, true

	if s, err := sys.Settings().Get(ctx, board); err != nil || s != instance.Defaults() {
		t.Fatalf("Get before any write = %+v, %v; want the defaults", s, err)
	}
	if _, err := sys.Settings().Update(ctx, board, 0, func(c *instance.Settings) error { c.EnableEnvironments = off; return nil }); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("a board member's update = %v, want ErrDenied", err)
	}
	box, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: "box", Driver: fk.Name()})
	if err != nil {
		t.Fatal(err)
	}
	host, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: "host", Driver: "local", Config: map[string]any{"workdir": t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := sys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: box.ID})
	if err != nil {
		t.Fatal(err)
	}

	s, err := sys.Settings().Update(ctx, admin, 0, func(c *instance.Settings) error { c.EnableEnvironments = off; return nil })
	if err != nil || s.Revision != 1 || s.EnableEnvironments || s.UpdatedBy != admin.ID || s.UpdatedAt.IsZero() {
		t.Fatalf("disable = %+v, %v", s, err)
	}
	if stored, err := st.Settings.GetSettings(ctx); err != nil || stored.Revision != 1 || stored.EnableEnvironments || stored.UpdatedBy != admin.ID {
		t.Errorf("the host's store holds %+v, %v", stored, err)
	}
	if _, err := sys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: box.ID}); !errors.Is(err, instance.ErrEnvironmentsDisabled) {
		t.Errorf("Acquire while disabled = %v, want ErrEnvironmentsDisabled", err)
	}
	if _, err := sys.Prober().Probe(ctx, admin, box.ID, probe.Request{Company: "acme"}); !errors.Is(err, instance.ErrEnvironmentsDisabled) {
		t.Errorf("Probe while disabled = %v, want ErrEnvironmentsDisabled", err)
	}
	if _, err := kept.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Errorf("Release while disabled: %v", err)
	}
	if _, err := sys.Leases().Sweep(ctx, admin); err != nil {
		t.Errorf("Sweep while disabled: %v", err)
	}
	if _, err := sys.Catalog().List(ctx, board, environment.ListFilter{}); err != nil {
		t.Errorf("List while disabled: %v", err)
	}
	if _, err := sys.Settings().Update(ctx, admin, 0, func(c *instance.Settings) error { c.EnableEnvironments = on; return nil }); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("update at stale revision 0 = %v, want ErrConflict", err)
	}

	if _, err := sys.Settings().Update(ctx, admin, 1, func(c *instance.Settings) error { c.EnableEnvironments = on; c.ManagedSandboxOnly = on; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: host.ID}); !errors.Is(err, instance.ErrManagedSandboxOnly) {
		t.Errorf("Acquire of the host under managed-sandbox-only = %v, want ErrManagedSandboxOnly", err)
	}
	res, err := sys.Prober().Probe(ctx, admin, host.ID, probe.Request{Company: "acme"})
	if err != nil || res.OK || res.Code != reason.ManagedSandboxOnly {
		t.Errorf("Probe of the host under managed-sandbox-only = %+v, %v; want code managed_sandbox_only", res, err)
	}
	// Issue 56: managed-sandbox-only means a container at least, so a
	// sandbox driver that declares no isolation is refused too, with
	// isolation_below_minimum, and nothing is allocated: no lease record
	// in the host's store, no sandbox.
	bareEnv, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: "bare", Driver: "bare"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := st.Leases.ListLeases(ctx, lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: bareEnv.ID}); errcode.ReasonOf(err) != "isolation_below_minimum" ||
		!strings.Contains(errcode.MessageOf(err), "enableManagedSandboxOnly") {
		t.Errorf("Acquire of the bare sandbox under managed-sandbox-only = %v (reason %q), want isolation_below_minimum naming enableManagedSandboxOnly", err, errcode.ReasonOf(err))
	}
	if after, err := st.Leases.ListLeases(ctx, lease.Filter{}); err != nil || len(after) != len(before) || len(fakectl.Of(bare).Sandboxes()) != 0 {
		t.Errorf("the refused acquisition left %d lease records (was %d; %v) and %d sandboxes", len(after), len(before), err, len(fakectl.Of(bare).Sandboxes()))
	}
	h, err := sys.Leases().Acquire(ctx, admin, lease.AcquireRequest{Company: "acme", EnvironmentID: box.ID})
	if err != nil {
		t.Fatalf("Acquire of the sandbox under managed-sandbox-only: %v", err)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}
