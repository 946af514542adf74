package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/lease"
)

// TestPoolFaultSchedules runs seeded schedules with warm pools (issue 31):
// pool refills, adoptions, releases, process crashes (mid-adoption and
// mid-refill included), environment edits (identity, pool size, pool
// removed and restored, archive and restore), provider faults, clock jumps
// past the max age, and a second replica that refills, releases and
// sweeps. After the faults stop and a final sweep every sandbox is
// destroyed or owned by one live lease or pool member, no lease is left
// starting or pending, and no member was adopted twice.
func TestPoolFaultSchedules(t *testing.T) {
	t.Parallel()
	n := 1000
	if testing.Short() {
		n = 200
	}
	first := uint64(0)
	if s := os.Getenv("POOL_SEED"); s != "" { // rerun one schedule
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		first, n = v, 1
	}
	var total poolStats
	var failures []string
	leaked := 0
	for seed := first; seed < first+uint64(n); seed++ {
		leaks, st, problems := runPoolSchedule(t, seed)
		total.add(st)
		leaked += leaks
		if len(problems) > 0 {
			failures = append(failures, fmt.Sprintf("seed %d: %s", seed, strings.Join(problems, "; ")))
		}
	}
	fmt.Printf("lease: %d pool fault schedules, %d leaked sandboxes, %d members adopted twice (%+v)\n", n, leaked, total.Twice, total)
	if n > 1 && (total.RunnerSchedules < n/4 || total.RunnerStarts == 0 || total.RunnerFailures == 0 || total.RunnerReconnects == 0) {
		t.Errorf("runner pools too rare: %+v", total)
	}
	if n > 1 && (total.Adopted < n || total.Refilled < n || total.Crashes < n/10 || total.Edits < n/10 ||
		total.Retired == 0 || total.OtherRefills < n/10 || total.MidAdoption == 0) {
		t.Errorf("schedules too tame: %+v", total)
	}
	if len(failures) > 0 {
		t.Errorf("%d leaked sandboxes; %d failing seeds (rerun one with POOL_SEED):\n%s",
			leaked, len(failures), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
}

type poolStats struct {
	Adopted, Created, Refilled, Retired, Crashes, MidAdoption, Edits, OtherRefills, Twice int
	// RunnerSchedules counts the schedules with a runner pool; RunnerStarts
	// the member runners the hook started, RunnerFailures those it failed.
	RunnerSchedules, RunnerStarts, RunnerFailures, RunnerReconnects int
}

func (s *poolStats) add(o poolStats) {
	s.Adopted += o.Adopted
	s.Created += o.Created
	s.Refilled += o.Refilled
	s.Retired += o.Retired
	s.Crashes += o.Crashes
	s.MidAdoption += o.MidAdoption
	s.Edits += o.Edits
	s.OtherRefills += o.OtherRefills
	s.Twice += o.Twice
	s.RunnerSchedules += o.RunnerSchedules
	s.RunnerStarts += o.RunnerStarts
	s.RunnerFailures += o.RunnerFailures
	s.RunnerReconnects += o.RunnerReconnects
}

func runPoolSchedule(t *testing.T, seed uint64) (int, poolStats, []string) {
	var st poolStats
	rng := rand.New(rand.NewPCG(seed, 0x9001))
	w := newWorld(t, worldOpts{})
	listEnvs := func(o *mopts) {
		o.SweepEnvironments = func(ctx context.Context) ([]*environment.Environment, error) {
			return w.envs.ListEnvironments(ctx, environment.ListFilter{})
		}
		o.ManualPoolRefill = true
		knobs(o, func(k *leasetune.Knobs) { k.PoolConcurrency = 1 })
	}
	// Half the schedules run a runner pool: members start their runner
	// through the runner hook, which fails at times (the member is
	// destroyed), four acquisitions in five ask for that runner, and after a
	// crash the members' runners are disconnected until a pool pass
	// reconnects them.
	runnerPool := rng.IntN(2) == 0
	hook := &poolRunnerHook{}
	var runners *drivers.RunnerSet
	if runnerPool {
		spec := drivers.RunnerSpec{Binary: "/cache/berth-runner", SHA256: strings.Repeat("ef", 32)}
		runners = &drivers.RunnerSet{Build: func(context.Context, string) (drivers.RunnerSpec, error) { return spec, nil }}
		hook.failIf = func() bool { return rng.IntN(8) == 0 }
		w.tasks = hook
		inner := listEnvs
		listEnvs = func(o *mopts) {
			inner(o)
			o.PoolRunners = func() (*drivers.RunnerSet, error) { return runners, nil }
		}
	}
	w.env.Pool = &environment.Pool{Size: 1 + rng.IntN(3), MaxAge: time.Duration(1+rng.IntN(3)) * leaseTTL / 4, Runner: runnerPool}
	w.save(w.env)
	env2 := *w.env
	env2.ID, env2.Name, env2.Pool = "env-2", "sandbox two", nil
	env2.Config = w.env.Config.Clone()
	env2.Config["region"] = "other-1"
	w.save(&env2)
	envIDs := []string{w.env.ID, w.env.ID, env2.ID}
	policies := []lease.Policy{lease.Ephemeral, lease.Ephemeral, lease.ReuseByEnvironment, lease.RetainOnFailure}
	dispositions := []lease.Disposition{lease.ByPolicy, lease.Keep, lease.Stop, lease.Destroy}
	process := func(c *crasher) *lease.Manager {
		o := w.options()
		listEnvs(o)
		m, _ := newManagerWith(crashStore{s: w.store, c: c}, drivers.NewRegistry(crashDriver{Driver: w.fk, c: c}), w.asg, w.tasks, o)
		return m
	}
	proc := newCrasher()
	m := process(proc)
	other := w.newManager(listEnvs)
	var handles []*lease.Handle
	adoptedBy := map[string]string{} // member id -> the run that adopted it
	pickSandbox := func() string {
		all := fakectl.Of(w.fk).Sandboxes()
		if len(all) == 0 {
			return "fake-1"
		}
		return all[rng.IntN(len(all))].ID
	}
	edit := func() {
		st.Edits++
		e, err := w.envs.GetEnvironment(bg, w.env.ID)
		if err != nil {
			return
		}
		switch rng.IntN(5) {
		case 0:
			e.Config = e.Config.Clone()
			e.Config["region"] = fmt.Sprintf("r-%d", rng.IntN(3))
		case 1:
			e.Pool = &environment.Pool{Size: 1 + rng.IntN(3), MaxAge: leaseTTL / 2, Runner: runnerPool}
		case 2:
			e.Pool = nil
		case 3:
			e.Pool = &environment.Pool{Size: 2, Runner: runnerPool}
		case 4:
			e.Status = []environment.Status{environment.StatusArchived, environment.StatusActive}[rng.IntN(2)]
		}
		w.save(e)
	}
	steps := 15 + rng.IntN(25)
	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 28: // acquire: a run of its own, so one lease id per adoption
			run := fmt.Sprintf("run-%d", step)
			armed := false
			if rng.IntN(6) == 0 { // a crash in the middle of the acquisition
				proc.arm(1 + rng.IntN(4))
				armed = true
			}
			req := lease.AcquireRequest{Company: "acme", EnvironmentID: envIDs[rng.IntN(len(envIDs))],
				Workspace: "/w", Run: run, Policy: policies[rng.IntN(len(policies))]}
			if runnerPool && rng.IntN(5) != 0 {
				req.Runner = runners
			}
			h, err := m.Acquire(bg, op, req)
			if armed && proc.dead.Load() {
				st.MidAdoption++
			}
			if err != nil {
				break
			}
			handles = append(handles, h)
			l := h.Lease()
			// A reusable lease is handed to later runs by design (LEASE-4);
			// a lease of any other policy serves one run, so an id seen
			// twice would be a member adopted twice.
			if l.Labels["berth.pool"] == "member" && !lease.Reusable(l.Policy) {
				st.Adopted++
				if prev, dup := adoptedBy[l.ID]; dup {
					st.Twice++
					t.Errorf("seed %d: member %s adopted by %s and %s (policy %s, uses %d, status %s)", seed, l.ID, prev, run, l.Policy, l.Uses, l.Status)
				}
				adoptedBy[l.ID] = run
			}
		case r < 36: // exec
			if len(handles) > 0 {
				_, _ = handles[rng.IntN(len(handles))].Exec(bg, lease.Command{Argv: []string{"true"}})
			}
		case r < 50: // release
			if len(handles) > 0 {
				i := rng.IntN(len(handles))
				opts := lease.ReleaseOptions{Disposition: dispositions[rng.IntN(len(dispositions))], RunFailed: rng.IntN(3) == 0}
				if rng.IntN(3) == 0 {
					_, _ = other.Release(bg, op, handles[i].ID(), opts)
				} else {
					_, _ = handles[i].Release(bg, opts)
				}
				handles = slices.Delete(handles, i, i+1)
			}
		case r < 64: // a refill, by this process or the other replica
			rm := m
			if rng.IntN(3) == 0 {
				st.OtherRefills++
				rm = other
			}
			rep, _ := rm.MaintainPools(bg, op)
			st.Refilled++
			st.Created += rep.Created
			st.Retired += rep.Retired
		case r < 72:
			edit()
		case r < 80: // a provider fault
			var err error
			if rng.IntN(2) == 0 {
				err = errPermanent
			}
			switch rng.IntN(4) {
			case 0, 1:
				op := schedOps[rng.IntN(len(schedOps))]
				fakectl.Of(w.fk).FailNth(op, fakectl.Of(w.fk).Calls(op)+1+rng.IntN(3), err)
			case 2:
				fakectl.Of(w.fk).RefuseStop(pickSandbox(), err)
			case 3:
				_ = fakectl.Of(w.fk).Lose(pickSandbox())
			}
		case r < 86: // arm a crash of the current process
			proc.arm(1 + rng.IntN(8))
		case r < 92: // time passes, past the max age at times
			w.clk.Advance([]time.Duration{5 * time.Second, budget + claimGrace + time.Second, leaseTTL / 2}[rng.IntN(3)])
		default:
			var rep lease.SweepReport
			if rng.IntN(2) == 0 {
				rep, _ = other.Sweep(bg, op)
			} else {
				rep, _ = m.Sweep(bg, op)
			}
			st.Retired += rep.Pools.Retired
		}
		if proc.dead.Load() {
			st.Crashes++
			lease.Close(m)
			proc = newCrasher()
			m = process(proc)
			handles = nil
			w.clk.Advance(budget + claimGrace + time.Second)
			if runnerPool {
				// The crashed process took its members' runner ingress:
				// the next pool pass reconnects them (and may crash
				// while it does).
				pooled, _ := w.store.ListLeases(bg, lease.Filter{Statuses: []lease.Status{lease.StatusPooled}})
				hook.mu.Lock()
				if hook.disconnected == nil {
					hook.disconnected = map[string]bool{}
				}
				for _, l := range pooled {
					hook.disconnected[l.ID] = true
				}
				hook.mu.Unlock()
			}
		}
	}
	lease.Close(m)
	lease.Close(other)
	fakectl.Of(w.fk).ClearFaults()
	final := w.newManager(listEnvs)
	defer lease.Close(final)
	w.clk.Advance(budget + claimGrace + cleanupB + time.Second)
	var problems []string
	for range 3 {
		rep, err := final.Sweep(bg, op)
		if err != nil {
			problems = append(problems, fmt.Sprintf("final sweep: %v", err))
		}
		if rep.Claimed == 0 && rep.OrphansDestroyed == 0 && rep.Pools.Retired == 0 {
			break
		}
	}
	if runnerPool {
		st.RunnerSchedules++
		hook.mu.Lock()
		st.RunnerStarts, st.RunnerFailures, st.RunnerReconnects = len(hook.started), hook.failures, len(hook.reconnected)
		hook.mu.Unlock()
	}
	leaks, problems := checkOwnership(w, problems)
	// The members left must be adoptable: of the environment as it is now.
	cur, err := w.envs.GetEnvironment(bg, w.env.ID)
	if err == nil {
		members, _ := w.store.ListLeases(bg, lease.Filter{Statuses: []lease.Status{lease.StatusPooled}})
		if (cur.Pool == nil || cur.Status != environment.StatusActive) && len(members) > 0 {
			problems = append(problems, fmt.Sprintf("%d members left of a pool that is gone", len(members)))
		}
		if cur.Pool != nil && len(members) > cur.Pool.Size {
			problems = append(problems, fmt.Sprintf("%d members left of a pool of %d", len(members), cur.Pool.Size))
		}
	}
	return leaks, st, problems
}
