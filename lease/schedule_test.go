package lease_test

import (
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
	"github.com/berthdev/berth/lease"
)

// TestRandomFaultSchedules runs seeded schedules of acquire, exec, release,
// sweep, clock jumps and process crashes with provider faults injected;
// some releases and sweeps are done by a second replica that holds no
// handle.
// After the faults stop and a final sweep, every sandbox the provider holds
// must be owned by an active or retained lease (or a stopped, resumable
// one) or be destroyed (LEASE-2, LEASE-6, LEASE-7, LEASE-9).
func TestRandomFaultSchedules(t *testing.T) {
	t.Parallel()
	n := 1000
	if testing.Short() {
		n = 200
	}
	first := uint64(0)
	if s := os.Getenv("LEASE_SEED"); s != "" { // rerun one schedule
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		first, n = v, 1
	}
	leaked := 0
	var failures []string
	var total scheduleStats
	for seed := first; seed < first+uint64(n); seed++ {
		leaks, st, problems := runSchedule(t, seed)
		total.add(st)
		leaked += leaks
		if len(problems) > 0 {
			failures = append(failures, fmt.Sprintf("seed %d: %s", seed, strings.Join(problems, "; ")))
		}
	}
	fmt.Printf("lease: %d random fault schedules, %d leaked sandboxes (%+v)\n", n, leaked, total)
	// The schedules must really exercise crashes, faults and recovery.
	if n > 1 && (total.Crashes < n/10 || total.SlowStarts < n/10 || total.Acquired < n || total.Sandboxes < n ||
		total.Interrupted == 0 || total.CleanedUp == 0 || total.Orphans == 0 || total.OtherReleases < n/10 || total.OtherSweeps < n/10) {
		t.Errorf("schedules too tame: %+v", total)
	}
	if len(failures) > 0 {
		t.Errorf("%d leaked sandboxes; %d failing seeds (rerun one with runSchedule):\n%s",
			leaked, len(failures), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
}

var schedOps = []string{"create", "start", "stop", "destroy", "resume", "list", "exec"}

// scheduleStats counts what schedules did.
type scheduleStats struct {
	Acquired, Failed, Crashes, SlowStarts, Sandboxes int
	// releases and sweeps by a second replica without the handles
	OtherReleases, OtherSweeps int
	// from the final sweeps
	Interrupted, CleanedUp, Expired, Orphans int
}

func (s *scheduleStats) add(o scheduleStats) {
	s.Acquired += o.Acquired
	s.Failed += o.Failed
	s.Crashes += o.Crashes
	s.SlowStarts += o.SlowStarts
	s.Sandboxes += o.Sandboxes
	s.OtherReleases += o.OtherReleases
	s.OtherSweeps += o.OtherSweeps
	s.Interrupted += o.Interrupted
	s.CleanedUp += o.CleanedUp
	s.Expired += o.Expired
	s.Orphans += o.Orphans
}

// runSchedule runs the schedule of one seed and returns the number of
// leaked sandboxes, statistics and any other broken invariant.
func runSchedule(t *testing.T, seed uint64) (int, scheduleStats, []string) {
	var st scheduleStats
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	w := newWorld(t, worldOpts{})
	env2 := *w.env
	env2.ID, env2.Name = "env-2", "sandbox two"
	env2.Config = w.env.Config.Clone()
	env2.Config["region"] = "other-1"
	envs := []*environment.Environment{w.env, &env2}
	w.save(&env2)
	policies := []lease.Policy{lease.Ephemeral, lease.ReuseByEnvironment, lease.ReuseByWorkspace, lease.RetainOnFailure}
	dispositions := []lease.Disposition{lease.ByPolicy, lease.Keep, lease.Stop, lease.Destroy}

	proc := newCrasher()
	m := w.process(proc)
	// other is a second replica on the same store and provider: it
	// releases leases it holds no handle of, and sweeps (LEASE-10).
	other := w.newManager(nil)
	var handles []*lease.Handle
	pickSandbox := func() string {
		all := fakectl.Of(w.fk).Sandboxes()
		if len(all) == 0 {
			return "fake-1"
		}
		return all[rng.IntN(len(all))].ID
	}
	steps := 10 + rng.IntN(20)
	for range steps {
		switch r := rng.IntN(100); {
		case r < 30: // acquire
			req := lease.AcquireRequest{
				Company: "acme", EnvironmentID: envs[rng.IntN(len(envs))].ID,
				Workspace: fmt.Sprintf("/w%d", rng.IntN(2)), Run: fmt.Sprintf("run-%d", rng.IntN(4)),
				Policy: policies[rng.IntN(len(policies))],
			}
			var h *lease.Handle
			acquire := func() { h, _ = m.Acquire(bg, op, req) }
			if rng.IntN(8) == 0 { // a start longer than the budget
				st.SlowStarts++
				fakectl.Of(w.fk).SetStartDelay(3 * budget)
				w.advanceWhenStarting(2*budget, acquire)
				fakectl.Of(w.fk).SetStartDelay(0)
				w.clk.Advance(3 * budget)
			} else {
				acquire()
			}
			if h != nil {
				st.Acquired++
				handles = append(handles, h)
			} else {
				st.Failed++
			}
		case r < 42: // exec
			if len(handles) > 0 {
				_, _ = handles[rng.IntN(len(handles))].Exec(bg, lease.Command{Argv: []string{"true"}})
			}
		case r < 62: // release, by the holder or by the other replica
			if len(handles) > 0 {
				i := rng.IntN(len(handles))
				opts := lease.ReleaseOptions{Disposition: dispositions[rng.IntN(len(dispositions))], RunFailed: rng.IntN(3) == 0}
				if rng.IntN(3) == 0 {
					st.OtherReleases++
					_, _ = other.Release(bg, op, handles[i].ID(), opts)
				} else {
					_, _ = handles[i].Release(bg, opts)
				}
				handles = slices.Delete(handles, i, i+1)
			}
		case r < 77: // a provider fault
			var err error
			if rng.IntN(2) == 0 {
				err = errPermanent
			}
			switch rng.IntN(5) {
			case 0, 1:
				op := schedOps[rng.IntN(len(schedOps))]
				fakectl.Of(w.fk).FailNth(op, fakectl.Of(w.fk).Calls(op)+1+rng.IntN(3), err)
			case 2:
				fakectl.Of(w.fk).RefuseStop(pickSandbox(), err)
			case 3:
				fakectl.Of(w.fk).FakeStop(pickSandbox(), []string{"unconfirmed", "foreign_id"}[rng.IntN(2)])
			case 4:
				_ = fakectl.Of(w.fk).Lose(pickSandbox())
			}
		case r < 85: // arm a crash of the current process
			proc.arm(1 + rng.IntN(8))
		case r < 93: // time passes
			w.clk.Advance([]time.Duration{5 * time.Second, budget + claimGrace + time.Second, leaseTTL + time.Second}[rng.IntN(3)])
		default:
			if rng.IntN(2) == 0 {
				st.OtherSweeps++
				_, _ = other.Sweep(bg, op)
			} else {
				_, _ = m.Sweep(bg, op)
			}
		}
		if proc.dead.Load() {
			// Restart: a new process; the dead one's claims expire meanwhile.
			st.Crashes++
			proc = newCrasher()
			m = w.process(proc)
			handles = nil
			w.clk.Advance(budget + claimGrace + time.Second)
		}
	}
	// The faults stop; a fresh process sweeps once every claim has expired.
	fakectl.Of(w.fk).ClearFaults()
	fakectl.Of(w.fk).SetStartDelay(0)
	final := w.newManager(nil)
	w.clk.Advance(budget + claimGrace + cleanupB + time.Second)
	var problems []string
	for range 3 {
		rep, err := final.Sweep(bg, op)
		if err != nil {
			problems = append(problems, fmt.Sprintf("final sweep: %v", err))
		}
		st.Interrupted += rep.Interrupted
		st.CleanedUp += rep.CleanedUp
		st.Expired += rep.Expired
		st.Orphans += rep.OrphansDestroyed
		if rep.Claimed == 0 && rep.OrphansDestroyed == 0 {
			break
		}
	}
	st.Sandboxes = len(fakectl.Of(w.fk).Sandboxes())
	leaks, problems := checkOwnership(w, problems)
	return leaks, st, problems
}

// checkOwnership counts sandboxes that are neither destroyed nor owned by
// an active, retained or stopped-resumable lease, and reports leases left
// unresolved or sharing a sandbox.
func checkOwnership(w *world, problems []string) (int, []string) {
	all, err := w.store.ListLeases(bg, lease.Filter{})
	if err != nil {
		return 0, append(problems, err.Error())
	}
	owner := map[string]string{}
	for _, l := range all {
		switch {
		case l.Status == lease.StatusStarting || l.Status == lease.StatusPendingCleanup:
			problems = append(problems, fmt.Sprintf("lease %s left %s (%s; %s)", l.ID, l.Status, l.FailureReason, l.CleanupEvidence))
		case lease.HoldsSandbox(l) && l.ProviderLeaseID != "":
			if o, dup := owner[l.ProviderLeaseID]; dup {
				problems = append(problems, fmt.Sprintf("leases %s and %s both hold sandbox %s", o, l.ID, l.ProviderLeaseID))
			}
			owner[l.ProviderLeaseID] = l.ID
		}
	}
	leaks := 0
	for _, s := range fakectl.Of(w.fk).Sandboxes() {
		if s.State == drivers.StateDestroyed {
			continue
		}
		if _, ok := owner[s.ID]; !ok {
			leaks++
			problems = append(problems, fmt.Sprintf("sandbox %s (%s, lease label %s) leaked", s.ID, s.State, s.Labels["berth.lease"]))
		}
	}
	return leaks, problems
}
