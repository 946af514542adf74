package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/instancehook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// poolWorld is a world whose environment has a warm pool of size and
// whose managers list the world's environments (SweepEnvironments).
func poolWorld(t *testing.T, size int, maxAge time.Duration, mod func(*mopts)) *world {
	t.Helper()
	var w *world
	w = newWorld(t, worldOpts{options: func(o *mopts) {
		o.SweepEnvironments = func(ctx context.Context) ([]*environment.Environment, error) {
			return w.envs.ListEnvironments(ctx, environment.ListFilter{})
		}
		if mod != nil {
			mod(o)
		}
	}})
	w.env.Pool = &environment.Pool{Size: size, MaxAge: maxAge}
	w.save(w.env)
	t.Cleanup(func() { lease.Close(w.m) })
	return w
}

// pooled returns the ids of the pooled members in the store, sorted.
func (w *world) pooled() []string {
	w.t.Helper()
	ls, err := w.store.ListLeases(context.Background(), lease.Filter{Statuses: []lease.Status{lease.StatusPooled}})
	if err != nil {
		w.t.Fatal(err)
	}
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.ID)
	}
	sort.Strings(ids)
	return ids
}

func (w *world) maintain(m *lease.Manager) lease.PoolReport {
	w.t.Helper()
	rep, err := m.MaintainPools(context.Background(), op)
	if err != nil {
		w.t.Fatalf("MaintainPools: %v", err)
	}
	return rep
}

// A pass fills the pool with members of the instance (labelled, running,
// counted for no company); an acquisition adopts one: the member's record
// becomes the lease (same id, same sandbox), nothing new is created for
// it, and a background refill replaces it.
func TestPoolAdoption(t *testing.T) {
	ctx := context.Background()
	w := poolWorld(t, 2, 0, nil)
	if rep := w.maintain(w.m); rep.Created != 2 || rep.CreateFailed != 0 {
		t.Fatalf("first pass: %+v, want 2 created", rep)
	}
	members := w.pooled()
	if len(members) != 2 || len(w.liveSandboxes()) != 2 {
		t.Fatalf("members %v, sandboxes %v; want 2 each", members, w.liveSandboxes())
	}
	m := w.get(members[0])
	if m.Company != authz.InstanceCompany || m.Labels["berth.pool"] != "member" || m.Run != "" || w.state(m.ProviderLeaseID) != drivers.StateRunning {
		t.Fatalf("member record %+v (sandbox %s)", m, w.state(m.ProviderLeaseID))
	}
	if rep := w.maintain(w.m); rep.Created != 0 || rep.Retired != 0 {
		t.Fatalf("a pass over a full pool: %+v, want nothing", rep)
	}
	h := w.acquire(lease.Ephemeral, "run-1")
	l := h.Lease()
	if l.ID != members[0] || l.ProviderLeaseID != m.ProviderLeaseID || l.Company != "acme" || l.Run != "run-1" || l.Status != lease.StatusActive || l.Uses != 1 {
		t.Fatalf("adopted lease %+v; want member %s (sandbox %s) for acme", l, members[0], m.ProviderLeaseID)
	}
	if res, err := h.Exec(ctx, lease.Command{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec on the adopted sandbox: %+v, %v", res, err)
	}
	lease.WaitPoolRefills(w.m)
	if got := w.pooled(); len(got) != 2 || got[0] == members[0] && got[1] == members[0] {
		t.Fatalf("after adoption and refill: members %v", got)
	}
	if n := len(w.liveSandboxes()); n != 3 {
		t.Fatalf("%d sandboxes made, want 3 (2 members, 1 refill)", n)
	}
	// The same run gets its lease back, not another member.
	if again := w.acquire(lease.Ephemeral, "run-1"); again.Lease().ID != l.ID {
		t.Fatalf("same run: lease %s, want %s", again.Lease().ID, l.ID)
	}
	// An adopted member serves one lease: released, its sandbox goes.
	rel, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || rel.Status != lease.StatusReleased || w.state(l.ProviderLeaseID) != drivers.StateDestroyed {
		t.Fatalf("release: %+v, %v, sandbox %s", rel, err, w.state(l.ProviderLeaseID))
	}
	for _, id := range w.pooled() {
		if id == l.ID {
			t.Fatalf("the released lease %s is pooled again", id)
		}
	}
}

// Quotas count pool members for no company until adopted.
func TestPoolQuota(t *testing.T) {
	w := poolWorld(t, 2, 0, func(o *mopts) { o.Quotas.PerCompany = 1 })
	w.maintain(w.m)
	w.acquire(lease.Ephemeral, "run-1")
	lease.WaitPoolRefills(w.m)
	_, err := w.m.Acquire(context.Background(), op, w.req(lease.Ephemeral, "run-2"))
	if !errors.Is(err, lease.ErrQuota) {
		t.Fatalf("second lease of acme: %v, want ErrQuota", err)
	}
	if got := w.pooled(); len(got) != 2 {
		t.Fatalf("a refused acquisition adopted: members %v", got)
	}
}

// Members that may no longer be adopted are destroyed with receipts:
// after a config edit (fingerprint), past the max age, beyond a shrunk
// size, of an archived or deleted environment or a removed pool; each
// pass refills what the pool lacks.
func TestPoolRetire(t *testing.T) {
	ctx := context.Background()
	w := poolWorld(t, 2, time.Hour, nil)
	w.maintain(w.m)
	first := w.pooled()

	// A knob edit keeps them (no identity change)...
	w.env.Config["cpus"] = int64(2)
	w.save(w.env)
	if rep := w.maintain(w.m); rep.Retired != 0 || rep.Created != 0 {
		t.Fatalf("after a knob edit: %+v, want nothing", rep)
	}
	// ...an identity edit retires them and refills from the new config.
	w.env.Config["region"] = "eu-2"
	w.save(w.env)
	rep := w.maintain(w.m)
	if rep.Retired != 2 || rep.Created != 2 {
		t.Fatalf("after an identity edit: %+v, want 2 retired, 2 created", rep)
	}
	for _, id := range first {
		l := w.get(id)
		if l.Status != lease.StatusReleased || l.Cleanup != "confirmed" || w.state(l.ProviderLeaseID) != drivers.StateDestroyed {
			t.Fatalf("retired member %s: %s %s %q, sandbox %s", id, l.Status, l.Cleanup, l.FailureReason, w.state(l.ProviderLeaseID))
		}
	}
	// The new members adopt for the new config.
	h := w.acquire(lease.Ephemeral, "run-1")
	lease.WaitPoolRefills(w.m)
	if h.Lease().Config.String("region") != "eu-2" {
		t.Fatalf("adopted a member of region %q", h.Lease().Config.String("region"))
	}

	// Past the max age.
	w.clk.Advance(time.Hour)
	if rep := w.maintain(w.m); rep.Retired != 2 || rep.Created != 2 {
		t.Fatalf("past the max age: %+v, want 2 retired, 2 created", rep)
	}
	// A smaller pool.
	w.env.Pool = &environment.Pool{Size: 1, MaxAge: time.Hour}
	w.save(w.env)
	if rep := w.maintain(w.m); rep.Retired != 1 || rep.Created != 0 || len(w.pooled()) != 1 {
		t.Fatalf("after shrinking: %+v, members %v", rep, w.pooled())
	}
	// Archived.
	w.env.Status = environment.StatusArchived
	w.save(w.env)
	if rep := w.maintain(w.m); rep.Retired != 1 || len(w.pooled()) != 0 {
		t.Fatalf("after archiving: %+v, members %v", rep, w.pooled())
	}
	// Restored, then the pool removed.
	w.env.Status = environment.StatusActive
	w.save(w.env)
	w.maintain(w.m)
	w.env.Pool = nil
	w.save(w.env)
	if rep, err := w.m.Sweep(ctx, op); err != nil || rep.Pools.Retired != 1 || len(w.pooled()) != 0 {
		t.Fatalf("sweep after removing the pool: %+v, %v, members %v", rep, err, w.pooled())
	}
	// Gone: a sweep with the complete list reaps members of environments
	// it does not list.
	w.env.Pool = &environment.Pool{Size: 2}
	w.save(w.env)
	w.maintain(w.m)
	cur, err := w.envs.GetEnvironment(ctx, w.env.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.envs.DeleteEnvironment(ctx, w.env.ID, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if rep, err := w.m.Sweep(ctx, op); err != nil || rep.Pools.Retired != 2 || len(w.pooled()) != 0 {
		t.Fatalf("sweep after the environment was deleted: %+v, %v, members %v", rep, err, w.pooled())
	}
	if live := w.liveSandboxes(); len(live) != 1 || live[0] != h.Lease().ProviderLeaseID {
		t.Fatalf("live sandboxes %v, want only the adopted lease's", live)
	}
}

// The blast radius shows the members, and the catalog's delete drains
// them through the manager's ReferenceClearer.
func TestPoolDrainOnDelete(t *testing.T) {
	ctx := context.Background()
	w := poolWorld(t, 2, 0, nil)
	m, usage := newManagerWith(w.store, w.reg, w.asg, nil, w.options())
	defer lease.Close(m)
	// Without SweepEnvironments a pass knows no environment.
	if rep, err := m.MaintainPools(ctx, op); err != nil || rep != (lease.PoolReport{}) {
		t.Fatalf("pass without SweepEnvironments: %+v, %v; want nothing done", rep, err)
	}
	w.maintain(w.m)
	u, err := usage.EnvironmentUsage(ctx, w.env.ID)
	if err != nil || len(u.PooledLeases) != 2 || len(u.ActiveLeases) != 0 {
		t.Fatalf("usage: %+v, %v; want 2 pooled leases", u, err)
	}
	if err := usage.(envhook.ReferenceClearer).ClearEnvironment(ctx, w.env.ID); err != nil {
		t.Fatal(err)
	}
	if got := w.pooled(); len(got) != 0 || len(w.liveSandboxes()) != 0 {
		t.Fatalf("after drain: members %v, sandboxes %v", got, w.liveSandboxes())
	}
}

// A second replica adopts by resuming the member by id; a member whose
// sandbox vanished is recorded as gone and the next one is adopted. Of
// concurrent acquisitions on two replicas each member goes to one.
func TestPoolTwoReplicas(t *testing.T) {
	ctx := context.Background()
	w := poolWorld(t, 4, 0, nil)
	w.maintain(w.m)
	members := w.pooled()
	gone := w.get(members[0])
	if _, err := w.fk.Destroy(ctx, nil, gone.ProviderLeaseID); err != nil {
		t.Fatal(err)
	}
	m2 := w.newManager(nil)
	defer lease.Close(m2)
	h, err := m2.Acquire(ctx, op, w.req(lease.Ephemeral, "run-r2"))
	if err != nil {
		t.Fatal(err)
	}
	if h.Lease().ID != members[1] {
		t.Fatalf("replica 2 adopted %s, want %s (after the gone %s)", h.Lease().ID, members[1], members[0])
	}
	if l := w.get(gone.ID); l.Status != lease.StatusFailed || l.Cleanup != "confirmed" {
		t.Fatalf("the gone member: %s %s", l.Status, l.Cleanup)
	}
	lease.WaitPoolRefills(m2)
	// Concurrent acquisitions on both replicas.
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]string{}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := w.m
			if i%2 == 1 {
				m = m2
			}
			run := fmt.Sprintf("c%d", i)
			h, err := m.Acquire(ctx, op, w.req(lease.Ephemeral, run))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, dup := seen[h.Lease().ID]; dup {
				t.Errorf("lease %s given to %s and %s", h.Lease().ID, prev, run)
			}
			seen[h.Lease().ID] = run
		}()
	}
	wg.Wait()
	lease.WaitPoolRefills(w.m)
	lease.WaitPoolRefills(m2)
	sbs := map[string]string{}
	ls, _ := w.store.ListLeases(ctx, lease.Filter{Live: true})
	for _, l := range ls {
		if prev, dup := sbs[l.ProviderLeaseID]; dup {
			t.Errorf("sandbox %s held by leases %s and %s", l.ProviderLeaseID, prev, l.ID)
		}
		sbs[l.ProviderLeaseID] = l.ID
	}
}

// IMG-3 at adoption: a member whose live image is not the pinned one its
// record promises is destroyed and the next member adopted.
func TestPoolAdoptionVerifiesLiveImage(t *testing.T) {
	w := poolWorld(t, 2, 0, func(o *mopts) { o.ManualPoolRefill = true })
	id := w.fk.AddImage("registry.test/app@sha256:" + strings.Repeat("ab", 32))
	w.env.Config["image"] = id.String()
	w.save(w.env)
	w.maintain(w.m)
	members := w.pooled()
	if len(members) != 2 {
		t.Fatalf("members %v", members)
	}
	bad := w.get(members[0])
	fakectl.Of(w.fk).ReportWrongImage(bad.ProviderLeaseID)
	h := w.acquire(lease.Ephemeral, "run-1")
	if h.Lease().ID != members[1] {
		t.Fatalf("adopted %s, want %s (the member with the right image)", h.Lease().ID, members[1])
	}
	l := w.get(bad.ID)
	if l.Status != lease.StatusFailed || !strings.Contains(l.FailureReason, "live image") || w.state(bad.ProviderLeaseID) != drivers.StateDestroyed {
		t.Fatalf("the member with another image: %s %q, sandbox %s", l.Status, l.FailureReason, w.state(bad.ProviderLeaseID))
	}
}

// A member's fingerprint includes the active template: a promote retires
// the members made from the configured image, the refill starts from the
// template (labelled with it) and an adoption of such a member reports the
// template's identity.
func TestPoolFollowsTheActiveTemplate(t *testing.T) {
	ctx := context.Background()
	w := poolWorld(t, 1, 0, func(o *mopts) { o.ManualPoolRefill = true })
	src := w.acquire(lease.Ephemeral, "src")
	id, err := leasehook.Capture(src, ctx, drivers.CaptureRequest{Name: "tools"})
	if err != nil {
		t.Fatal(err)
	}
	w.maintain(w.m)
	old := w.pooled()
	cur, err := w.envs.GetEnvironment(ctx, w.env.ID)
	if err != nil {
		t.Fatal(err)
	}
	next := *cur
	next.ActiveTemplate = &environment.ActiveTemplate{ID: "tpl-1", Identity: id.String(), SourceFingerprint: envhook.SourceFingerprint(cur, w.fk)}
	next.Revision++
	if err := w.envs.UpdateEnvironment(ctx, &next, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if rep := w.maintain(w.m); rep.Retired != 1 || rep.Created != 1 {
		t.Fatalf("after the promote: %+v, want 1 retired, 1 created", rep)
	}
	now := w.pooled()
	if len(now) != 1 || now[0] == old[0] || w.get(now[0]).Labels["berth.template-id"] != "tpl-1" {
		t.Fatalf("members %v (before %v): want a new one labelled with the template", now, old)
	}
	h, err := w.m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Run: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := leasehook.ImageIdentity(h, ctx)
	if err != nil || h.ID() != now[0] || live != id {
		t.Fatalf("adopted %s reporting %v (%v); want member %s reporting %s", h.ID(), live, err, now[0], id)
	}
}

// poolRunnerHook is the runner protocol's side of the lease manager for
// runner pools, recorded: StartPoolRunner sees each member while it
// starts (the controller's own is tested in internal/controller and on Docker
// at the root).
type poolRunnerHook struct {
	mu       sync.Mutex
	started  []*lease.Lease
	fail     error
	failIf   func() bool // if set, a start fails when it reports true
	failures int
	// disconnected lists the members whose runner is connected nowhere;
	// reconnected those ReconnectPoolRunner saw, with their claim.
	disconnected map[string]bool
	reconnected  []*lease.Lease
}

func (h *poolRunnerHook) PoolRunnerConnected(_ context.Context, id string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.disconnected[id], nil
}

func (h *poolRunnerHook) ReconnectPoolRunner(_ context.Context, lh *lease.Handle) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reconnected = append(h.reconnected, lh.Lease())
	delete(h.disconnected, lh.ID())
	return nil
}

func (h *poolRunnerHook) StopTasks(context.Context, string) (leasehook.TaskStopReport, error) {
	return leasehook.TaskStopReport{}, nil
}
func (h *poolRunnerHook) LeaseEnded(string) {}
func (h *poolRunnerHook) StartPoolRunner(_ context.Context, lh *lease.Handle) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started = append(h.started, lh.Lease())
	if h.failIf != nil && h.failIf() {
		h.failures++
		return errors.New("the runner sent no hello")
	}
	return h.fail
}

// A runner pool's members are prepared for the manager's runner binary
// (Options.PoolRunners, recorded as Lease.Runner) and started with their
// runner through the runner hook while they are starting, their provider
// id recorded: an acquisition for that binary adopts one, one without a
// runner or for another binary does not. A member whose runner does not
// start is destroyed; without the hook or runner binaries a runner pool
// does not fill.
func TestRunnerPoolMembersArePreparedForTheRunner(t *testing.T) {
	ctx := context.Background()
	spec := drivers.RunnerSpec{Binary: "/cache/berth-runner", SHA256: strings.Repeat("ef", 32)}
	set := func(s drivers.RunnerSpec) *drivers.RunnerSet {
		return &drivers.RunnerSet{Build: func(context.Context, string) (drivers.RunnerSpec, error) { return s, nil }}
	}
	hook := &poolRunnerHook{}
	withRunners := func(o *mopts) {
		o.ManualPoolRefill = true
		o.PoolRunners = func() (*drivers.RunnerSet, error) { return set(spec), nil }
	}
	w := poolWorld(t, 1, 0, withRunners)
	w.tasks = hook
	w.m = w.newManager(func(o *mopts) {
		withRunners(o)
		o.SweepEnvironments = func(ctx context.Context) ([]*environment.Environment, error) {
			return w.envs.ListEnvironments(ctx, environment.ListFilter{})
		}
	})
	w.env.Pool = &environment.Pool{Size: 1, Runner: true}
	w.save(w.env)
	w.maintain(w.m)
	members := w.pooled()
	if len(members) != 1 || w.get(members[0]).Runner == nil || w.get(members[0]).Runner.Binary != spec.Binary {
		t.Fatalf("members %v: want one prepared for %s", members, spec.Binary)
	}
	if len(hook.started) != 1 {
		t.Fatalf("the runner hook started %d members, want 1", len(hook.started))
	}
	if st := hook.started[0]; st.ID != members[0] || st.Status != lease.StatusStarting || st.Company != authz.InstanceCompany || st.ProviderLeaseID == "" || st.Labels["berth.pool"] != "member" {
		t.Errorf("the hook saw %s %s of %s with provider id %q, want member %s starting, the instance's, with its provider id", st.ID, st.Status, st.Company, st.ProviderLeaseID, members[0])
	}
	plain, err := w.m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Run: "plain"})
	if err != nil || plain.ID() == members[0] {
		t.Fatalf("an acquisition without a runner adopted the runner member: %v, %v", plain, err)
	}
	other := spec
	other.SHA256 = strings.Repeat("aa", 32)
	h, err := w.m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Run: "other", Runner: set(other)})
	if err != nil || h.ID() == members[0] {
		t.Fatalf("an acquisition for another binary adopted the member: %v, %v", h, err)
	}
	h, err = w.m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Run: "runner", Runner: set(spec)})
	if err != nil || h.ID() != members[0] {
		t.Fatalf("the acquisition for the pool's binary got %v, %v; want member %s", h, err, members[0])
	}
	// Another process (a restart) finds the pooled member whose runner is
	// connected nowhere and has it reconnect, once, holding a claim on it
	// meanwhile, with its sandbox resumed by id.
	if _, err := w.m.MaintainPools(ctx, op); err != nil {
		t.Fatal(err)
	}
	pooled := w.pooled()
	if len(pooled) != 1 {
		t.Fatalf("pooled %v, want one member again", pooled)
	}
	hook.disconnected = map[string]bool{pooled[0]: true}
	restarted := w.newManager(func(o *mopts) {
		withRunners(o)
		o.SweepEnvironments = func(ctx context.Context) ([]*environment.Environment, error) {
			return w.envs.ListEnvironments(ctx, environment.ListFilter{})
		}
	})
	if _, err := restarted.MaintainPools(ctx, op); err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.MaintainPools(ctx, op); err != nil {
		t.Fatal(err)
	}
	if len(hook.reconnected) != 1 || hook.reconnected[0].ID != pooled[0] || hook.reconnected[0].ClaimedBy == "" {
		t.Fatalf("reconnected %v, want member %s once, claimed", hook.reconnected, pooled[0])
	}
	if l := w.get(pooled[0]); l.Status != lease.StatusPooled || l.ClaimedBy != "" {
		t.Errorf("after the reconnect the member is %s claimed by %q, want pooled and unclaimed", l.Status, l.ClaimedBy)
	}
	h, err = restarted.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Run: "after-restart", Runner: set(spec)})
	if err != nil || h.ID() != pooled[0] {
		t.Fatalf("the acquisition after the restart got %v, %v; want member %s", h, err, pooled[0])
	}
	lease.Close(restarted)
	// A member whose runner does not start is destroyed, not pooled.
	hook.fail = errors.New("no hello")
	if _, err := w.m.MaintainPools(ctx, op); err == nil || !strings.Contains(err.Error(), "no hello") {
		t.Fatalf("MaintainPools with a failing runner start: %v, want its error", err)
	}
	if got := w.pooled(); len(got) != 0 {
		t.Errorf("pooled after a failed runner start: %v, want none", got)
	}
	if n := len(w.liveSandboxes()); n != 4 {
		t.Errorf("%d live sandboxes, want 4 (the two adopted members and two new leases): the failed member leaked", n)
	}
	// Without the runner hook, or without runner binaries, a runner pool
	// does not fill.
	for name, mod := range map[string]func(*mopts){
		"no hook":    withRunners,
		"no runners": func(o *mopts) { o.ManualPoolRefill = true },
	} {
		w.tasks = nil
		if name == "no runners" {
			w.tasks = &poolRunnerHook{}
		}
		m := w.newManager(func(o *mopts) {
			mod(o)
			o.SweepEnvironments = func(ctx context.Context) ([]*environment.Environment, error) {
				return w.envs.ListEnvironments(ctx, environment.ListFilter{})
			}
		})
		if _, err := m.MaintainPools(ctx, op); !errors.Is(err, drivers.ErrUnsupported) {
			t.Errorf("runner pool with %s: %v, want ErrUnsupported", name, err)
		}
		lease.Close(m)
	}
}

// CFG-9: while the instance settings disable environments, no refill
// starts a member (MaintainPools creates nothing and fails nothing); once
// enabled, the pass fills the pool.
func TestPoolRefillHonoursInstanceSettings(t *testing.T) {
	t.Parallel()
	hs, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
	svc, reader := hs.(*instance.Service), hr.(instance.Reader)
	w := poolWorld(t, 2, 0, func(o *mopts) { o.Settings, o.ManualPoolRefill = reader, true })
	setSettings(t, svc, false, false)
	if rep := w.maintain(w.m); rep.Created != 0 || len(w.pooled()) != 0 {
		t.Fatalf("refill with environments disabled: %+v, members %v; want none", rep, w.pooled())
	}
	setSettings(t, svc, true, false)
	// Issue 56: nor while the fake (isolation none) is below the minimum.
	if _, err := svc.Update(context.Background(), op, instance.AnyRevision, func(c *instance.Settings) error {
		c.MinimumIsolation = drivers.IsolationContainer
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rep := w.maintain(w.m); rep.Created != 0 || len(w.pooled()) != 0 {
		t.Fatalf("refill below the minimum isolation: %+v, members %v; want none", rep, w.pooled())
	}
	// Nor under managed-sandbox-only, which means container.
	if _, err := svc.Update(context.Background(), op, instance.AnyRevision, func(c *instance.Settings) error {
		c.MinimumIsolation, c.ManagedSandboxOnly = drivers.IsolationNone, true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rep := w.maintain(w.m); rep.Created != 0 || len(w.pooled()) != 0 {
		t.Fatalf("refill under managed-sandbox-only (isolation none): %+v, members %v; want none", rep, w.pooled())
	}
	if _, err := svc.Update(context.Background(), op, instance.AnyRevision, func(c *instance.Settings) error {
		c.ManagedSandboxOnly = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rep := w.maintain(w.m); rep.Created != 2 || len(w.pooled()) != 2 {
		t.Errorf("refill once enabled: %+v, members %v; want 2", rep, w.pooled())
	}
}
