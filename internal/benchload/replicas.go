package benchload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// reuseEvery: each worker's every reuseEvery-th acquisition is of the
// reusable environment, from every replica at once.
const reuseEvery = 64

// cleanupsPerReplica is how many leases per replica are left pending
// cleanup for the sweeps before the run.
const cleanupsPerReplica = 8

// sweepPause is how long each replica's sweeper waits between sweeps.
const sweepPause = 200 * time.Millisecond

// Replicas runs replicas host replicas (separate berth.Systems, each with
// its own connection pool, as separate processes would be) on the one
// PostgreSQL database at dsn, with one fake provider whose sandboxes take
// providerDelay to start (fakectl.Controls.SetStartDelay, on the wall clock), for
// dur. Each replica runs workersPer workers doing ephemeral acquire+release
// cycles (Ops); before every 64th cycle (staggered across workers) each
// worker also acquires one reusable environment (lease.ReuseByEnvironment: one reuse
// key acquired from every replica, never released). Each replica also runs
// one sweeper (lease.Manager.Sweep every 200 ms). Before the run, 8 leases per replica are released while
// the provider refuses their destroy, so that they are left
// pending_cleanup for the sweeps of all replicas to prove during the run.
//
// Afterwards it counts what LEASE-8 and LEASE-10 forbid: DoubleCreates,
// the sandboxes the provider made for the reuse key beyond one, and
// TwiceProcessed, the cleanups the sweeps of all replicas report as proven
// beyond the ones left to them. The run fails with an error if any call
// failed, or if a cleanup left to the sweeps was still not proven after
// the run and ten more sweeps of every replica.
func Replicas(ctx context.Context, dsn string, replicas, workersPer int, providerDelay, dur time.Duration) (res Result, err error) {
	replicas, workersPer = max(replicas, 1), max(workersPer, 1)
	fk := fake.New(nil)
	fakectl.Of(fk).SetStartDelay(providerDelay)
	systems := make([]*berth.System, 0, replicas)
	for range replicas {
		sys, closeSys, err := OpenSystem(ctx, dsn, fk)
		if err != nil {
			return Result{}, err
		}
		defer func() { err = errors.Join(err, closeSys()) }()
		systems = append(systems, sys)
	}
	// Before the Systems close (deferred calls run last first): destroy
	// what the run left (the reusable sandbox).
	defer func() { err = errors.Join(err, releaseAll(context.WithoutCancel(ctx), systems[0])) }()
	eph, err := NewEnvironment(ctx, systems[0], "replicas")
	if err != nil {
		return Result{}, err
	}
	reuse, err := NewEnvironment(ctx, systems[0], "replicas-reuse")
	if err != nil {
		return Result{}, err
	}
	prefix := "run-" + randomHex(4) + "-"
	var seq atomic.Int64
	newRun := func() string { return prefix + fmt.Sprint(seq.Add(1)) }

	// Cleanups left to the sweeps.
	pending := 0
	for i := range cleanupsPerReplica * replicas {
		sys := systems[i%replicas]
		h, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: Company, EnvironmentID: eph, Run: newRun()})
		if err != nil {
			return Result{}, fmt.Errorf("benchload: acquire a lease to leave pending: %w", err)
		}
		fakectl.Of(fk).RefuseStop(h.SandboxID(), errors.New("benchload: destroy refused"))
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); !errors.Is(err, lease.ErrCleanupPending) {
			return Result{}, fmt.Errorf("benchload: release %s while the provider refuses: %v, want it pending cleanup", h.ID(), err)
		}
		pending++
	}
	fakectl.Of(fk).ClearFaults()

	var processed atomic.Int64
	var sweepErr error
	var sweepOnce sync.Once
	sweep := func(sys *berth.System) {
		rep, err := sys.Leases().Sweep(ctx, operator)
		processed.Add(int64(rep.CleanedUp))
		if err != nil {
			sweepOnce.Do(func() { sweepErr = fmt.Errorf("benchload: sweep: %w", err) })
		}
	}
	sweepCtx, stopSweeps := context.WithCancel(ctx)
	var sweepers sync.WaitGroup
	for _, sys := range systems {
		sweepers.Go(func() {
			for sweepCtx.Err() == nil {
				sweep(sys)
				select {
				case <-sweepCtx.Done():
				case <-time.After(sweepPause):
				}
			}
		})
	}
	var reuses atomic.Int64
	acquired := make([]int, replicas*workersPer) // per worker, each its own
	res, err = run(replicas*workersPer, dur, func(w int) error {
		sys := systems[w%replicas]
		acquired[w]++
		if acquired[w]%reuseEvery == w%reuseEvery { // staggered across workers
			reuses.Add(1)
			if _, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{
				Company: Company, EnvironmentID: reuse, Run: newRun(), Policy: lease.ReuseByEnvironment,
			}); err != nil {
				return fmt.Errorf("benchload: acquire the reusable environment: %w", err)
			}
		}
		return cycle(ctx, sys, eph, newRun())
	})
	stopSweeps()
	sweepers.Wait()
	res.Workload, res.Replicas, res.Workers = "replicas", replicas, workersPer
	res.ReuseAcquisitions = int(reuses.Load())
	res.PendingCleanups = pending
	if err != nil {
		return res, err
	}
	// What the run's sweeps did not prove yet, all replicas sweep at once.
	for range 10 {
		left, err := systems[0].Leases().List(ctx, operator, lease.Filter{Environment: eph, Statuses: []lease.Status{lease.StatusPendingCleanup}})
		if err != nil {
			return res, fmt.Errorf("benchload: %w", err)
		}
		if len(left) == 0 {
			break
		}
		var wg sync.WaitGroup
		for _, sys := range systems {
			wg.Go(func() { sweep(sys) })
		}
		wg.Wait()
	}
	res.CleanupsProcessed = int(processed.Load())
	res.TwiceProcessed = max(res.CleanupsProcessed-pending, 0)
	made := 0
	for _, sb := range fakectl.Of(fk).Sandboxes() {
		if sb.Labels["berth.environment"] == reuse {
			made++
		}
	}
	res.DoubleCreates = max(made-1, 0)
	if sweepErr != nil {
		return res, sweepErr
	}
	if res.CleanupsProcessed < pending {
		return res, fmt.Errorf("benchload: %d of %d cleanups left to the sweeps were not proven", pending-res.CleanupsProcessed, pending)
	}
	return res, nil
}

// releaseAll destroys the live leases of sys's store (the reusable one
// the run leaves).
func releaseAll(ctx context.Context, sys *berth.System) error {
	ls, err := sys.Leases().List(ctx, operator, lease.Filter{Live: true})
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range ls {
		if l.Status != lease.StatusActive && l.Status != lease.StatusRetained {
			continue
		}
		if _, err := sys.Leases().Release(ctx, operator, l.ID, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil && !errors.Is(err, lease.ErrClaimed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
