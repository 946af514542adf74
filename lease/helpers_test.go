package lease_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/lease"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// op is the local operator the tests act as, unless a test is about
// authorization.
var op = authz.Principal{ID: "op", Role: authz.RoleLocalOperator}

// Budgets of the test world.
const (
	budget     = time.Minute
	claimGrace = 30 * time.Second
	cleanupB   = 20 * time.Second
	leaseTTL   = 24 * time.Hour
	retainTTL  = 48 * time.Hour
)

// stepClock is a fake clock on which short waits (retry backoff) pass at
// once by advancing the fake time, while long ones (budgets, cleanup
// bounds, slow starts) wait for the test to advance it. The provider gets
// its own stepClock over the same fake time, which counts its long waits,
// so that a test advances only once the provider waits for a start.
type stepClock struct {
	*clock.Fake
	w *waits // nil: not counted
}

// waits counts long waits.
type waits struct {
	mu      sync.Mutex
	n       int
	changed chan struct{}
}

const stepThreshold = time.Second

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	if d < stepThreshold {
		c.Fake.Advance(max(d, 0))
		ch := make(chan time.Time, 1)
		ch <- c.Fake.Now()
		return ch
	}
	ch := c.Fake.After(d)
	if c.w != nil {
		c.w.mu.Lock()
		c.w.n++
		close(c.w.changed)
		c.w.changed = make(chan struct{})
		c.w.mu.Unlock()
	}
	return ch
}

// count returns the number of long waits registered so far.
func (w *waits) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// waitFor waits until n long waits were registered or done is closed.
func (w *waits) waitFor(n int, done <-chan struct{}) bool {
	for {
		w.mu.Lock()
		if w.n >= n {
			w.mu.Unlock()
			return true
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// world is one test setup: a fake provider on a step clock, a store and a
// manager.
type world struct {
	t      testing.TB
	clk    *stepClock // the manager's clock
	fkw    *waits     // the provider's long waits
	fk     *fake.Driver
	store  lease.Store
	reg    *drivers.Registry
	env    *environment.Environment
	envs   environment.Store
	binds  environment.BindingStore
	asg    *environment.Assignments
	saveMu sync.Mutex
	m      *lease.Manager
	tasks  leasehook.TaskStopper // the managers' runner hook (nil: none)
	ids    atomic.Int64
	// secretLookups counts secret resolutions.
	secretLookups atomic.Int64
}

type worldOpts struct {
	fake *fake.Options
	// startDelay and startupBudget are the fake's (fakectl.Controls).
	startDelay, startupBudget time.Duration
	store                     lease.Store
	wrap                      func(*fake.Driver, lease.Store) drivers.Driver // wraps the fake for the registry
	config                    map[string]any                                 // raw environment config
	options                   func(*mopts)
}

// mopts are a test manager's Options and the hook's Sources (its
// collaborators: clock, secrets, settings, pool runners, sweep targets).
type mopts struct {
	*lease.Options
	*leasehook.Sources
}

func newWorld(t testing.TB, wo worldOpts) *world {
	f := clock.NewFake(t0)
	w := &world{t: t, clk: &stepClock{Fake: f}, fkw: &waits{changed: make(chan struct{})}}
	fo := fake.Options{}
	if wo.fake != nil {
		fo = *wo.fake
	}
	w.fk = fake.New(&fo)
	ctl := fakectl.Of(w.fk)
	ctl.SetClock(&stepClock{Fake: f, w: w.fkw})
	ctl.SetStartDelay(wo.startDelay)
	ctl.SetStartupBudget(wo.startupBudget)
	w.store = wo.store
	if w.store == nil {
		w.store = lease.NewMemoryStore()
	}
	var d drivers.Driver = w.fk
	if wo.wrap != nil {
		d = wo.wrap(w.fk, w.store)
	}
	w.reg = drivers.NewRegistry(d)
	raw := map[string]any{"startup_timeout": budget.String()}
	if wo.config != nil {
		raw = wo.config
	}
	cfg, err := w.fk.Schema().Normalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	w.env = &environment.Environment{ID: "env-1", Name: "sandbox one", Driver: w.fk.Name(), Status: environment.StatusActive, Config: cfg, Revision: 1}
	w.envs, w.binds = envhook.NewMemoryStore().(environment.Store), envhook.NewMemoryBindingStore().(environment.BindingStore)
	w.asg = envhook.NewAssignments(w.binds, w.envs, w.reg, &envhook.Options{TestMode: true}).(*environment.Assignments)
	w.save(w.env)
	w.m = w.newManager(wo.options)
	return w
}

// save stores env (as it is now) in the world's environment store, which
// the managers read.
func (w *world) save(env *environment.Environment) {
	w.t.Helper()
	w.saveMu.Lock() // concurrent acquisitions build their requests at once
	defer w.saveMu.Unlock()
	ctx := context.Background()
	cur, err := w.envs.GetEnvironment(ctx, env.ID)
	if err == nil && cur.Status == env.Status && cur.Driver == env.Driver && reflect.DeepEqual(cur.Config, env.Config) && reflect.DeepEqual(cur.Pool, env.Pool) && cur.RequireIsolation == env.RequireIsolation {
		return
	}
	if errors.Is(err, errcode.ErrNotFound) {
		if err := w.envs.CreateEnvironment(ctx, env, false); err != nil {
			w.t.Fatal(err)
		}
		return
	}
	if err != nil {
		w.t.Fatal(err)
	}
	upd := *env
	upd.Revision = cur.Revision + 1
	if err := w.envs.UpdateEnvironment(ctx, &upd, cur.Revision); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) options() *mopts {
	o := &mopts{Options: &lease.Options{
		InstanceID: "test-instance",
		ClaimGrace: claimGrace,
	}, Sources: &leasehook.Sources{
		Clock: w.clk,
		Secrets: func(_ context.Context, ref config.SecretRef) (string, error) {
			w.secretLookups.Add(1)
			if ref.ID == "fake-key" {
				return "s3cret-value", nil
			}
			return "", fmt.Errorf("no secret %s", ref)
		},
	}}
	knobs(o, func(k *leasetune.Knobs) {
		k.Rand = func() float64 { return 0 }
		k.NewID = func() string { return fmt.Sprintf("L%d", w.ids.Add(1)) }
		k.LeaseTTL, k.ResumableTTL = leaseTTL, retainTTL
		k.CleanupBudget = cleanupB
		k.RetryInitial, k.RetryMax = 100*time.Millisecond, 400*time.Millisecond
		k.PollInterval = time.Millisecond
	})
	return o
}

// knobs lets f change the internal knobs of o (internal/leasetune).
func knobs(o *mopts, f func(*leasetune.Knobs)) { leasehook.Tune(o.Options, f) }

func (w *world) newManager(mod func(*mopts)) *lease.Manager {
	o := w.options()
	if mod != nil {
		mod(o)
	}
	src := *o.Sources
	src.Store, src.Drivers, src.Assignments, src.Tasks, src.Options = w.store, w.reg, w.asg, w.tasks, o.Options
	m, _ := lease.NewManager(src)
	return m
}

func (w *world) req(p lease.Policy, run string) lease.AcquireRequest {
	w.save(w.env)
	return lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Workspace: "/work", Run: run, Policy: p}
}

func (w *world) acquire(p lease.Policy, run string) *lease.Handle {
	w.t.Helper()
	h, err := w.m.Acquire(context.Background(), op, w.req(p, run))
	if err != nil {
		w.t.Fatalf("Acquire(%s, %s): %v", p, run, err)
	}
	return h
}

func (w *world) get(id string) *lease.Lease {
	w.t.Helper()
	l, err := w.store.GetLease(context.Background(), id)
	if err != nil {
		w.t.Fatalf("GetLease(%s): %v", id, err)
	}
	return l
}

func (w *world) state(id string) drivers.State {
	st, ok := fakectl.Of(w.fk).State(id)
	if !ok {
		return "lost"
	}
	return st
}

// liveSandboxes returns the ids of sandboxes the fake holds that are not
// destroyed.
func (w *world) liveSandboxes() []string {
	var out []string
	for _, s := range fakectl.Of(w.fk).Sandboxes() {
		if s.State != drivers.StateDestroyed {
			out = append(out, s.ID)
		}
	}
	return out
}

// inBackground runs f in a goroutine and returns a channel closed when it
// returns.
func inBackground(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return done
}

// advanceWhenStarting runs f and, each time the provider starts waiting for
// a slow start while f runs, advances the clock by d; it returns when f is
// done.
func (w *world) advanceWhenStarting(d time.Duration, f func()) {
	base := w.fkw.count()
	done := inBackground(f)
	for w.fkw.waitFor(base+1, done) {
		w.clk.Advance(d)
		base = w.fkw.count()
	}
	<-done
}

var errPermanent = errors.New("injected permanent failure")

// failingStore fails chosen operations.
type failingStore struct {
	lease.Store
	failInsert atomic.Bool
	// failUpdates > 0 fails that many next updates.
	failUpdates atomic.Int64
}

var errStoreDown = errors.New("store unavailable")

func (s *failingStore) InsertLease(ctx context.Context, l *lease.Lease, q lease.Quotas) (*lease.Lease, error) {
	if s.failInsert.Load() {
		return nil, errStoreDown
	}
	return s.Store.InsertLease(ctx, l, q)
}

func (s *failingStore) UpdateLease(ctx context.Context, l *lease.Lease) error {
	if s.failUpdates.Add(-1) >= 0 {
		return errStoreDown
	}
	s.failUpdates.Store(0)
	return s.Store.UpdateLease(ctx, l)
}

// knobbed returns o after f changed its internal knobs.
func knobbed(o *lease.Options, f func(*leasetune.Knobs)) *lease.Options {
	leasehook.Tune(o, f)
	return o
}

// newManagerWith returns a manager over store and reg with the hook's
// Sources: o is a *mopts (its Options and Sources), a *lease.Options, or
// nil.
func newManagerWith(store lease.Store, reg *drivers.Registry, asg *environment.Assignments, tasks leasehook.TaskStopper, o any) (*lease.Manager, envhook.UsageReporter[environment.Usage]) {
	var src leasehook.Sources
	switch o := o.(type) {
	case *mopts:
		src = *o.Sources
		src.Options = o.Options
	case *lease.Options:
		src.Options = o
	}
	src.Store, src.Drivers, src.Assignments, src.Tasks = store, reg, asg, tasks
	return lease.NewManager(src)
}
