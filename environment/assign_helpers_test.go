package environment_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/clock"
)

// errProviderDisabled is why the "down" fake reports itself unavailable.
var errProviderDisabled = errors.New("provider disabled by the host")

// assignRegistry holds real drivers: the fake provider with every
// capability ("fake"), a fake that does not declare reuse and terminal
// ("lean"), a fake whose provider is unavailable ("down"), and the local
// host driver (exec and stream_exec only).
func assignRegistry() *drivers.Registry {
	return drivers.NewRegistry(
		fake.New(&fake.Options{Name: "fake"}),
		fake.New(&fake.Options{Name: "lean", Undeclared: drivers.NewSet(drivers.CapReuse, drivers.CapTerminal)}),
		fake.New(&fake.Options{Name: "down", Unavailable: errProviderDisabled}),
		local.New(nil),
	)
}

// asgFixture is a catalog in test mode with the assignment service as its
// usage reporter, over memory stores, and these environments (by name):
//
//	full     fake driver, active
//	lean     lean driver (no reuse, no terminal), active
//	down     down driver (provider unavailable), active
//	host     local driver, active (the server host)
//	old      fake driver, archived
//	retired  driver "retired", not registered (written to the store directly)
//	broken   fake driver, stored config no longer validates (written directly)
type asgFixture struct {
	cat      *environment.Catalog
	envs     environment.Store
	bindings environment.BindingStore
	asg      *environment.Assignments // test mode on, like the catalog
	strict   *environment.Assignments // test mode off over the same stores
	ids      map[string]string        // environment name -> id
	clock    *clock.Fake
}

func newAsgFixture(t testing.TB, mod func(*environment.Options)) *asgFixture {
	t.Helper()
	return newAsgFixtureOn(t, environment.NewMemoryStore(), environment.NewMemoryBindingStore(), mod)
}

func newAsgFixtureOn(t testing.TB, envs environment.Store, bindings environment.BindingStore, mod func(*environment.Options)) *asgFixture {
	t.Helper()
	ctx := context.Background()
	reg := assignRegistry()
	f := &asgFixture{envs: envs, bindings: bindings, ids: map[string]string{}, clock: clock.NewFake(t0)}
	testDrivers := []string{"lean", "down"}
	f.asg = environment.NewAssignments(bindings, envs, reg, environment.WithTestOptions(&environment.Options{TestMode: true},
		environment.TestOptions{TestDrivers: testDrivers, Clock: f.clock}))
	f.strict = environment.NewAssignments(bindings, envs, reg, environment.WithTestOptions(nil, environment.TestOptions{TestDrivers: testDrivers}))
	var mu sync.Mutex
	n := 0
	opts := environment.WithTestOptions(&environment.Options{TestMode: true}, environment.TestOptions{
		TestDrivers: testDrivers, Clock: f.clock,
		NewID: func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return fmt.Sprintf("env_%03d", n)
		},
	})
	if mod != nil {
		mod(opts)
	}
	f.cat = environment.NewCatalog(envs, reg, environment.NewMemorySecretStore(), f.asg, opts)
	for _, e := range []struct{ name, driver string }{
		{"full", "fake"}, {"lean", "lean"}, {"down", "down"}, {"host", "local"}, {"old", "fake"},
	} {
		v, err := f.cat.Create(ctx, admin, environment.CreateRequest{Name: e.name, Driver: e.driver})
		if err != nil {
			t.Fatalf("Create(%s): %v", e.name, err)
		}
		f.ids[e.name] = v.ID
	}
	if _, err := f.cat.Archive(ctx, admin, f.ids["old"], 1); err != nil {
		t.Fatalf("Archive(old): %v", err)
	}
	for _, e := range []*environment.Environment{
		{ID: "env_retired", Name: "retired", Driver: "retired", Status: environment.StatusActive, Revision: 1},
		{ID: "env_broken", Name: "broken", Driver: "fake", Status: environment.StatusActive, Revision: 1,
			Config: config.Config{"cpus": int64(500)}},
	} {
		if err := envs.CreateEnvironment(ctx, e, false); err != nil {
			t.Fatalf("CreateEnvironment(%s): %v", e.Name, err)
		}
		f.ids[e.Name] = e.ID
	}
	f.ids["missing"] = "env_missing" // never existed
	return f
}

// bind is one binding of a test table: kind, key, company and the name of
// the environment (a key of asgFixture.ids).
type bind struct {
	kind    environment.BindingKind
	key     string
	company string
	env     string
}

func (b bind) ref() environment.BindingRef {
	return environment.BindingRef{Kind: b.kind, Company: b.company, Key: b.key}
}

// put stores bindings directly in the binding store, as they would be after
// a bind followed by an archive, a driver removal or a delete elsewhere.
func (f *asgFixture) put(t testing.TB, bs ...bind) {
	t.Helper()
	for _, b := range bs {
		id, ok := f.ids[b.env]
		if !ok {
			t.Fatalf("unknown environment %q in a test table", b.env)
		}
		err := f.bindings.PutBinding(context.Background(), &environment.Binding{
			BindingRef: b.ref(), EnvironmentID: id,
			Revision: 1, CreatedAt: t0, UpdatedAt: t0, CreatedBy: "u_admin", UpdatedBy: "u_admin",
		}, 0)
		if err != nil {
			t.Fatalf("PutBinding(%+v): %v", b, err)
		}
	}
}

// set binds through the service as admin.
func (f *asgFixture) set(t testing.TB, b bind) *environment.Binding {
	t.Helper()
	got, err := environment.Bind(f.asg, context.Background(), admin, environment.SetBinding{
		Kind: b.kind, Key: b.key, Company: b.company, EnvironmentID: f.ids[b.env],
	})
	if err != nil {
		t.Fatalf("Set(%+v): %v", b, err)
	}
	return got
}

func wsBind(key, company, env string) bind {
	return bind{environment.BindingWorkspace, key, company, env}
}
func projectBind(key, company, env string) bind {
	return bind{environment.BindingProject, key, company, env}
}
func agentBind(key, company, env string) bind {
	return bind{environment.BindingAgent, key, company, env}
}
func defaultBind(env string) bind { return bind{environment.BindingInstanceDefault, "", "", env} }
