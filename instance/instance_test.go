package instance_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/instance/instancetest"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/instancehook"
)

var (
	admin    = authz.Principal{ID: "admin-1", Role: authz.RoleInstanceAdmin}
	operator = authz.Principal{ID: "op-1", Role: authz.RoleLocalOperator}
	board    = authz.Principal{ID: "bob", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	agent    = authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
	nobody   = authz.Principal{ID: "x"}
)

func TestMemoryStorePassesTheSuite(t *testing.T) {
	t.Parallel()
	instancetest.RunStoreTests(t, func(*testing.T) instance.Store { return instance.NewMemoryStore() })
}

// countingStore counts the reads that reach the store.
type countingStore struct {
	instance.Store
	reads atomic.Int64
}

func (c *countingStore) GetSettings(ctx context.Context) (instance.Settings, error) {
	c.reads.Add(1)
	return c.Store.GetSettings(ctx)
}

// CFG-9: never written, the settings are the defaults (environments on,
// host drivers allowed) at revision 0, for every reader.
func TestNeverWrittenSettingsAreTheDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, r := instance.NewService(instance.NewMemoryStore(), nil)
	for _, p := range []authz.Principal{admin, operator, board, agent} {
		got, err := svc.Get(ctx, p)
		if err != nil {
			t.Fatalf("Get as %s: %v", p, err)
		}
		if got != instance.Defaults() || !got.EnableEnvironments || got.ManagedSandboxOnly || got.Revision != 0 {
			t.Errorf("Get as %s = %+v, want the defaults", p, got)
		}
	}
	if got, err := r.Current(ctx); err != nil || got != instance.Defaults() {
		t.Errorf("Reader.Current = %+v, %v; want the defaults", got, err)
	}
}

// CFG-9: only instance admins (and local operators, who have their
// powers) change the settings; every known role reads them; a principal
// without a role reads nothing.
func TestOnlyInstanceAdminsUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, _ := instance.NewService(instance.NewMemoryStore(), nil)
	for _, p := range []authz.Principal{board, agent, nobody} {
		_, err := svc.Update(ctx, p, instance.AnyRevision, func(c *instance.Settings) error { c.EnableEnvironments = false; return nil })
		if !errors.Is(err, errcode.ErrDenied) || errcode.Code(err) != errcode.Denied {
			t.Errorf("Update as %s = %v, want ErrDenied", p, err)
		}
	}
	if _, err := svc.Get(ctx, nobody); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("Get without a role = %v, want ErrDenied", err)
	}
	if s, _ := svc.Get(ctx, admin); s != instance.Defaults() {
		t.Errorf("after refused updates the settings are %+v", s)
	}
	s, err := svc.Update(ctx, operator, 0, func(c *instance.Settings) error { c.ManagedSandboxOnly = true; return nil })
	if err != nil {
		t.Fatalf("Update as a local operator: %v", err)
	}
	if s.Revision != 1 || !s.ManagedSandboxOnly || !s.EnableEnvironments || s.UpdatedBy != operator.ID {
		t.Errorf("Update as a local operator = %+v", s)
	}
}

// CFG-9: every update records who and when, at the next revision; a stale
// revision is a conflict that writes nothing; an update that sets nothing
// is invalid.
func TestUpdateRecordsWhoAndWhenWithOptimisticRevisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC))
	svc, _ := instance.NewService(instance.NewMemoryStore(), instance.WithClock(nil, clk))
	s, err := svc.Update(ctx, admin, 0, func(c *instance.Settings) error { c.EnableEnvironments = false; return nil })
	if err != nil {
		t.Fatal(err)
	}
	want := instance.Settings{EnableEnvironments: false, Revision: 1, UpdatedAt: clk.Now(), UpdatedBy: admin.ID,
		QuotaPerCompany: 8, QuotaPerCompanyEnvironment: 4}
	if s != want {
		t.Errorf("first update = %+v, want %+v", s, want)
	}
	clk.Advance(time.Minute)
	if _, err := svc.Update(ctx, operator, 0, func(c *instance.Settings) error { c.EnableEnvironments = true; return nil }); !errors.Is(err, errcode.ErrConflict) || errcode.Code(err) != errcode.Conflict {
		t.Errorf("update at stale revision 0 = %v, want errcode.ErrConflict", err)
	}
	if got, _ := svc.Get(ctx, admin); got != want {
		t.Errorf("after the conflict the settings are %+v, want %+v", got, want)
	}
	s, err = svc.Update(ctx, operator, 1, func(c *instance.Settings) error { c.EnableEnvironments = true; c.ManagedSandboxOnly = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	want = instance.Settings{EnableEnvironments: true, ManagedSandboxOnly: true, Revision: 2, UpdatedAt: clk.Now(), UpdatedBy: operator.ID,
		QuotaPerCompany: 8, QuotaPerCompanyEnvironment: 4}
	if s != want {
		t.Errorf("second update = %+v, want %+v", s, want)
	}
	// The quotas are settings: 0 sets no limit, a negative one is invalid.
	s, err = svc.Update(ctx, admin, 2, func(c *instance.Settings) error { c.QuotaPerCompany = 0; c.QuotaPerCompanyEnvironment = 2; return nil })
	if err != nil || s.QuotaPerCompany != 0 || s.QuotaPerCompanyEnvironment != 2 || !s.ManagedSandboxOnly || s.Revision != 3 {
		t.Errorf("quota update = %+v, %v", s, err)
	}
	if _, err := svc.Update(ctx, admin, 3, func(c *instance.Settings) error { c.QuotaPerCompany = -1; return nil }); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("a negative quota = %v, want errcode.ErrInvalid", err)
	}
	if _, err := svc.Update(ctx, board, 3, func(c *instance.Settings) error { c.QuotaPerCompany = 100; return nil }); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("a board member raising the quota = %v, want ErrDenied", err)
	}
	if _, err := svc.Update(ctx, admin, -2, func(c *instance.Settings) error { c.EnableEnvironments = true; return nil }); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("an update at revision -2 = %v, want errcode.ErrInvalid", err)
	}
	s, err = svc.Update(ctx, admin, instance.AnyRevision, func(c *instance.Settings) error { c.ManagedSandboxOnly = false; return nil })
	if err != nil || s.Revision != 4 || s.ManagedSandboxOnly || !s.EnableEnvironments || s.QuotaPerCompanyEnvironment != 2 {
		t.Errorf("an update at AnyRevision = %+v, %v", s, err)
	}
}

// The gate's Reader (the lease hot path) reads the store at most once per
// MaxStaleness; this Service's updates are seen at once, another
// replica's (another Service on the same store) once the copy is older
// than MaxStaleness.
func TestReaderCachesWithinTheStalenessBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC))
	st := &countingStore{Store: instance.NewMemoryStore()}
	mine, r := instance.NewService(st, instance.WithClock(nil, clk))
	other, _ := instance.NewService(st, instance.WithClock(nil, clk))

	for range 100 {
		if s, err := r.Current(ctx); err != nil || !s.EnableEnvironments {
			t.Fatalf("Current = %+v, %v", s, err)
		}
	}
	if n := st.reads.Load(); n != 1 {
		t.Errorf("100 reads within the bound reached the store %d times, want 1", n)
	}
	// This process's update: at once.
	if _, err := mine.Update(ctx, admin, 0, func(c *instance.Settings) error { c.EnableEnvironments = false; return nil }); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Current(ctx); s.EnableEnvironments || s.Revision != 1 {
		t.Errorf("after this service's update Current = %+v, want revision 1 with environments off", s)
	}
	// Another replica's update: after the bound.
	if _, err := other.Update(ctx, admin, 1, func(c *instance.Settings) error { c.EnableEnvironments = true; return nil }); err != nil {
		t.Fatal(err)
	}
	clk.Advance(instance.DefaultMaxStaleness / 2)
	if s, _ := r.Current(ctx); s.Revision != 1 {
		t.Errorf("within the bound Current = %+v, want the cached revision 1", s)
	}
	clk.Advance(instance.DefaultMaxStaleness)
	if s, _ := r.Current(ctx); s.Revision != 2 || !s.EnableEnvironments {
		t.Errorf("past the bound Current = %+v, want revision 2 with environments on", s)
	}

	// No cache: every read reaches the store.
	st2 := &countingStore{Store: instance.NewMemoryStore()}
	_, r2 := instance.NewService(st2, instance.WithClock(&instancehook.Options{MaxStaleness: -1}, clk))
	for range 3 {
		if _, err := r2.Current(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := st2.reads.Load(); n != 3 {
		t.Errorf("with MaxStaleness -1, 3 reads reached the store %d times", n)
	}
}

// failingStore fails every read.
type failingStore struct{ instance.Store }

var errDown = errors.New("database down")

func (*failingStore) GetSettings(context.Context) (instance.Settings, error) {
	return instance.Settings{}, errDown
}

// A failing store read is returned, never taken for the defaults.
func TestReaderReturnsAFailingRead(t *testing.T) {
	t.Parallel()
	_, r := instance.NewService(&failingStore{instance.NewMemoryStore()}, nil)
	if _, err := r.Current(context.Background()); !errors.Is(err, errDown) {
		t.Errorf("Current over a failing store = %v, want its error", err)
	}
}

// Admit decides as CFG-9 says, and its refusals name the setting.
func TestAdmit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		s       instance.Settings
		host    bool
		want    error
		mention string
	}{
		{"defaults, sandbox", instance.Defaults(), false, nil, ""},
		{"defaults, host", instance.Defaults(), true, nil, ""},
		{"disabled, sandbox", instance.Settings{}, false, instance.ErrEnvironmentsDisabled, "enableEnvironments"},
		{"disabled, host", instance.Settings{ManagedSandboxOnly: true}, true, instance.ErrEnvironmentsDisabled, "enableEnvironments"},
		{"managed only, sandbox", instance.Settings{EnableEnvironments: true, ManagedSandboxOnly: true}, false, nil, ""},
		{"managed only, host", instance.Settings{EnableEnvironments: true, ManagedSandboxOnly: true}, true, instance.ErrManagedSandboxOnly, "managed_sandbox_only"},
	}
	for _, tc := range cases {
		err := tc.s.Admit("local", tc.host)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || errcode.Code(err) != errcode.Unavailable {
			t.Errorf("%s: %v, want %v (unavailable)", tc.name, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %q does not name %s", tc.name, err, tc.mention)
		}
	}
}

// Minimum is the stronger of minimumIsolation and the container that
// managed-sandbox-only means (issue 56).
func TestMinimumIsTheStrongerSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		managed bool
		set     drivers.Isolation
		want    drivers.Isolation
	}{
		{false, drivers.IsolationNone, drivers.IsolationNone},
		{true, drivers.IsolationNone, drivers.IsolationContainer},
		{false, drivers.IsolationContainer, drivers.IsolationContainer},
		{true, drivers.IsolationContainer, drivers.IsolationContainer},
		{true, drivers.IsolationGVisor, drivers.IsolationGVisor},
		{false, drivers.IsolationMicroVM, drivers.IsolationMicroVM},
	} {
		s := instance.Settings{EnableEnvironments: true, ManagedSandboxOnly: tc.managed, MinimumIsolation: tc.set}
		if got := s.Minimum(); got != tc.want {
			t.Errorf("managed %v, minimumIsolation %s: Minimum() = %s, want %s", tc.managed, tc.set, got, tc.want)
		}
	}
	if got := (instance.Settings{}).Minimum(); got != drivers.IsolationNone {
		t.Errorf("zero Settings: Minimum() = %s, want none", got)
	}
}

// Concurrent updates from one read revision: exactly one is accepted, the
// others are real conflicts, and the accepted one is what is stored at
// its revision, with its author.
func TestConcurrentUpdatesOfOneRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := instance.NewMemoryStore()
	const writers = 16
	type result struct {
		s   instance.Settings
		err error
	}
	results := make([]result, writers)
	var wg sync.WaitGroup
	for i := range writers {
		svc, _ := instance.NewService(st, nil) // one service per replica
		wg.Go(func() {
			p := authz.Principal{ID: fmt.Sprintf("admin-%d", i), Role: authz.RoleInstanceAdmin}
			s, err := svc.Update(ctx, p, 0, func(c *instance.Settings) error { c.ManagedSandboxOnly = i%2 == 0; return nil })
			results[i] = result{s, err}
		})
	}
	wg.Wait()
	won := -1
	for i, r := range results {
		switch {
		case r.err == nil && won >= 0:
			t.Errorf("updates %d and %d were both accepted at revision 0", won, i)
		case r.err == nil:
			won = i
		case !errors.Is(r.err, errcode.ErrConflict):
			t.Errorf("update %d: %v, want nil or errcode.ErrConflict", i, r.err)
		}
	}
	if won < 0 {
		t.Fatal("no update was accepted")
	}
	got, err := st.GetSettings(ctx)
	if err != nil || got != results[won].s || got.Revision != 1 || got.UpdatedBy != fmt.Sprintf("admin-%d", won) {
		t.Errorf("stored %+v, %v; the accepted update was %+v", got, err, results[won].s)
	}
}
