package environment_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/reason"
)

// TestProviderHealthGate (CAP-1, CAP-3, ASG-2): a provider never measured
// counts as available and is shown "not measured"; an explicit refresh
// that fails is kept with its reason and time, shown by listings of every
// catalog sharing the store (without measuring again), and refused by the
// gate that resolution passes; the next successful measurement clears it.
func TestProviderHealthGate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fd := fake.New(nil)
	reg := drivers.NewRegistry(fd)
	envs := environment.NewMemoryStore()
	health := environment.NewMemoryHealthStore()
	secrets := environment.NewMemorySecretStore()
	opts := &environment.Options{TestMode: true, Health: health}
	cat := environment.NewCatalog(envs, reg, secrets, nil, opts)
	other := environment.NewCatalog(envs, reg, secrets, nil, opts)                          // another process on the same store
	asg := environment.NewAssignments(environment.NewMemoryBindingStore(), envs, reg, opts) // the same options

	v, err := cat.Create(ctx, admin, environment.CreateRequest{Name: "sbx", Driver: "fake", Config: map[string]any{"region": "eu-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := environment.Bind(asg, ctx, admin, environment.SetBinding{Kind: environment.BindingInstanceDefault, EnvironmentID: v.ID}); err != nil {
		t.Fatal(err)
	}
	scope := authz.Scope{Company: "acme", Workspace: "ws"}
	list := func(c *environment.Catalog) *environment.View {
		t.Helper()
		vs, err := c.List(ctx, admin, environment.ListFilter{})
		if err != nil || len(vs) != 1 {
			t.Fatalf("List = %v, %v", vs, err)
		}
		return vs[0]
	}

	if got := list(cat); got.Health == nil || got.Health.Status != environment.HealthNotMeasured || got.Unavailable != "" {
		t.Fatalf("before any measurement: health %+v, unavailable %q", got.Health, got.Unavailable)
	}
	if _, err := asg.Resolve(ctx, admin, scope, 0); err != nil {
		t.Fatalf("a provider never measured must count as available: %v", err)
	}

	fakectl.Of(fd).Inject(fakectl.Fault{Op: "health", Err: errors.New("control plane answers 503")})
	h, err := cat.RefreshHealth(ctx, admin, v.ID)
	if err != nil || h == nil || h.Status != environment.HealthUnavailable || h.Code != reason.ProviderUnavailable ||
		!strings.Contains(h.Reason, "503") || h.CheckedAt == nil || h.Endpoint != "fake region eu-1" {
		t.Fatalf("RefreshHealth of a failing provider = %+v, %v", h, err)
	}
	calls := fakectl.Of(fd).Calls("health")
	for _, c := range []*environment.Catalog{cat, other} {
		got := list(c)
		if got.Health == nil || got.Health.Status != environment.HealthUnavailable || !strings.Contains(got.Unavailable, "503") ||
			!strings.Contains(got.Unavailable, "last measured unavailable at") {
			t.Errorf("listing after a failed measurement: health %+v, unavailable %q", got.Health, got.Unavailable)
		}
		if _, err := c.Get(ctx, admin, v.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := fakectl.Of(fd).Calls("health"); n != calls {
		t.Errorf("listings measured the provider %d times (CAP-1)", n-calls)
	}
	_, err = asg.Resolve(ctx, admin, scope, 0)
	var be *environment.Error
	if !errors.As(err, &be) || !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), "instance default") || !strings.Contains(err.Error(), "503") {
		t.Errorf("Resolve of an unavailable provider: %v; want a BindingError naming the binding and the reason", err)
	}
	env, err := envs.GetEnvironment(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	gate := environment.NewGate(reg, &environment.Options{TestMode: true, Health: health}) // the one probes get
	if _, _, err := gate.Check(ctx, env, 0); !errors.Is(err, drivers.ErrUnavailable) {
		t.Errorf("Gate.Check: %v, want ErrUnavailable", err)
	}

	fakectl.Of(fd).ClearFaults()
	if h, err := other.RefreshHealth(ctx, admin, v.ID); err != nil || h.Status != environment.HealthAvailable {
		t.Fatalf("RefreshHealth after recovery = %+v, %v", h, err)
	}
	if got := list(cat); got.Health.Status != environment.HealthAvailable || got.Unavailable != "" {
		t.Errorf("after recovery: health %+v, unavailable %q", got.Health, got.Unavailable)
	}
	if _, err := asg.Resolve(ctx, admin, scope, 0); err != nil {
		t.Errorf("Resolve after recovery: %v", err)
	}

	// PRB-7: measuring is an operator's action.
	agent := authz.Principal{ID: "a", Role: authz.RoleAgent, Companies: []string{"acme"}}
	if _, err := cat.RefreshHealth(ctx, agent, v.ID); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("agent RefreshHealth: %v, want ErrDenied", err)
	}
}

// TestRefreshAllHealth: the background round measures each endpoint once,
// however many environments share it, and skips host drivers.
func TestRefreshAllHealth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fd := fake.New(nil)
	reg := drivers.NewRegistry(fd)
	health := environment.NewMemoryHealthStore()
	cat := environment.NewCatalog(environment.NewMemoryStore(), reg, environment.NewMemorySecretStore(), nil, &environment.Options{TestMode: true, Health: health})
	for _, r := range []struct{ name, region string }{{"a", "eu-1"}, {"b", "eu-1"}, {"c", "us-1"}} {
		if _, err := cat.Create(ctx, admin, environment.CreateRequest{Name: r.name, Driver: "fake", Config: map[string]any{"region": r.region}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []authz.Principal{board, agent, {ID: "u_x"}} {
		if err := cat.RefreshAllHealth(ctx, p); !errors.Is(err, errcode.ErrDenied) {
			t.Errorf("RefreshAllHealth for %s: %v, want errcode.ErrDenied", p, err)
		}
	}
	if n := fakectl.Of(fd).Calls("health"); n != 0 {
		t.Errorf("refused rounds measured %d times", n)
	}
	if err := cat.RefreshAllHealth(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if n := fakectl.Of(fd).Calls("health"); n != 2 {
		t.Errorf("%d health checks for 2 endpoints", n)
	}
	hs, err := health.ListProviderHealth(ctx)
	if err != nil || len(hs) != 2 || !hs[0].Available || hs[0].Endpoint != "fake region eu-1" || hs[1].Endpoint != "fake region us-1" {
		t.Errorf("health records %+v, %v", hs, err)
	}
}

// CachedHealthStore answers the gate's reads from its cache for up to its
// staleness (a record and an absence alike), shows its own puts at once,
// and with no staleness budget left reads through to another writer's
// record.
func TestCachedHealthStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	shared := environment.NewMemoryHealthStore()
	down := environment.ProviderHealth{Driver: "fake", Endpoint: "fake region r", Available: false, Reason: "down", CheckedAt: time.Unix(1, 0).UTC()}
	up := down
	up.Available, up.Reason = true, ""

	long := environment.CachedHealthStore(shared, time.Hour)
	if _, err := long.GetProviderHealth(ctx, "fake", "fake region r"); !errors.Is(err, errcode.ErrNotFound) {
		t.Fatalf("never measured: %v, want errcode.ErrNotFound", err)
	}
	// Another replica measures: within the staleness, the absence stands.
	if err := shared.PutProviderHealth(ctx, down); err != nil {
		t.Fatal(err)
	}
	if _, err := long.GetProviderHealth(ctx, "fake", "fake region r"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("cached absence: %v, want errcode.ErrNotFound until the cache ages", err)
	}
	// Its own put replaces the cached record at once, and writes through.
	if err := long.PutProviderHealth(ctx, up); err != nil {
		t.Fatal(err)
	}
	if h, err := long.GetProviderHealth(ctx, "fake", "fake region r"); err != nil || !h.Available {
		t.Errorf("after its own put: %+v, %v; want available", h, err)
	}
	if h, err := shared.GetProviderHealth(ctx, "fake", "fake region r"); err != nil || !h.Available {
		t.Errorf("the put did not write through: %+v, %v", h, err)
	}

	// With its staleness spent, every read sees the other writer's record.
	short := environment.CachedHealthStore(shared, time.Nanosecond)
	if h, err := short.GetProviderHealth(ctx, "fake", "fake region r"); err != nil || !h.Available {
		t.Fatalf("read through: %+v, %v", h, err)
	}
	if err := shared.PutProviderHealth(ctx, down); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // more than its staleness
	if h, err := short.GetProviderHealth(ctx, "fake", "fake region r"); err != nil || h.Available || h.Reason != "down" {
		t.Errorf("another writer's record: %+v, %v; want unavailable, down", h, err)
	}
	if environment.CachedHealthStore(shared, -1) != shared {
		t.Error("a negative staleness wraps the store")
	}
	if _, err := long.GetProviderHealth(canceled(), "fake", "fake region r"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
