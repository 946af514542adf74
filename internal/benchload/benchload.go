package benchload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/postgres"
	"github.com/berthdev/berth/store/sqlite"
)

// InstanceID is the instance id of every System OpenSystem composes: the
// replicas of Replicas are one installation.
const InstanceID = "benchload"

// Company is the tenant the workloads lease for.
const Company = "bench"

// operator is the principal of every workload call.
var operator = authz.Principal{ID: "benchload", Role: authz.RoleLocalOperator}

// Result is what a workload measured.
type Result struct {
	// Workload names the workload: "driver", "acquire_release" or
	// "replicas".
	Workload string `json:"workload"`
	// Replicas and Workers are the Systems and the workers of each.
	Replicas int `json:"replicas"`
	Workers  int `json:"workers"`
	// Ops counts the acquire+release cycles completed in Elapsed.
	Ops     int           `json:"ops"`
	Elapsed time.Duration `json:"elapsed"`
	// OpsPerSec is Ops per second of Elapsed (wall clock), all workers of
	// all replicas together.
	OpsPerSec float64 `json:"opsPerSec"`
	// CPUPerOp is this process's CPU time (user and system, getrusage)
	// per op: steadier than the wall clock on a shared machine. It leaves
	// out a database server's own processes.
	CPUPerOp time.Duration `json:"cpuPerOp"`
	// ReuseAcquisitions counts the acquisitions of the reusable
	// environment (Replicas: every 64th acquisition of each worker, from
	// every replica, of one reuse key).
	ReuseAcquisitions int `json:"reuseAcquisitions"`
	// DoubleCreates counts the sandboxes the provider made for the reuse
	// key beyond the first (LEASE-8, LEASE-10): must be 0.
	DoubleCreates int `json:"doubleCreates"`
	// PendingCleanups counts the cleanups left to the replicas' sweeps
	// (leases whose destroy the provider refused at release),
	// CleanupsProcessed how many cleanups the sweeps of all replicas
	// report as proven, and TwiceProcessed how many more than
	// PendingCleanups that is (LEASE-10): must be 0.
	PendingCleanups   int `json:"pendingCleanups"`
	CleanupsProcessed int `json:"cleanupsProcessed"`
	TwiceProcessed    int `json:"twiceProcessed"`
}

// String is the result on one line.
func (r Result) String() string {
	s := fmt.Sprintf("%s replicas=%d workers=%d ops=%d %.0f ops/s cpu/op=%s", r.Workload, r.Replicas, r.Workers, r.Ops, r.OpsPerSec, r.CPUPerOp)
	if r.Workload == "replicas" {
		s += fmt.Sprintf(" reuse_acquisitions=%d double_creates=%d pending_cleanups=%d processed=%d twice_processed=%d",
			r.ReuseAcquisitions, r.DoubleCreates, r.PendingCleanups, r.CleanupsProcessed, r.TwiceProcessed)
	}
	return s
}

// OpenSystem composes a berth.System over the store at storeURL ("" or
// "memory": memory stores; "sqlite:///path" or "postgres://..." as
// store/sqlite and store/postgres open them) with the fake driver fk
// (shared by Systems that stand for replicas of one installation, as a
// provider is), in test mode, with InstanceID. close closes the System
// and then its database. It lifts the instance's lease quotas (its
// settings): the workloads hold more live leases of one company.
func OpenSystem(ctx context.Context, storeURL string, fk *fake.Driver) (sys *berth.System, close func() error, err error) {
	sys, _, close, err = openSystem(ctx, storeURL, fk, lease.Options{})
	return sys, close, err
}

// openSystem is OpenSystem with the lease manager's options lo (its
// InstanceID set here); it also returns the System's lease store (nil on
// memory).
func openSystem(ctx context.Context, storeURL string, fk *fake.Driver, lo lease.Options) (sys *berth.System, leases lease.Store, close func() error, err error) {
	lo.InstanceID = InstanceID
	opts := &berth.Options{Drivers: []drivers.Driver{fk}, TestMode: true, MemorySecrets: true, Leases: &lo}
	var closeDB func() error
	switch {
	case storeURL == "" || storeURL == "memory":
		closeDB = func() error { return nil }
	case strings.HasPrefix(storeURL, "sqlite:"):
		db, err := sqlite.Open(ctx, storeURL)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("benchload: %w", err)
		}
		opts.Stores, closeDB = db.Stores(), db.Close
	case strings.HasPrefix(storeURL, "postgres://"), strings.HasPrefix(storeURL, "postgresql://"):
		db, err := postgres.Open(ctx, storeURL)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("benchload: %w", err)
		}
		opts.Stores, closeDB = db.Stores(), db.Close
	default:
		return nil, nil, nil, fmt.Errorf("benchload: store %q: want memory, sqlite:///path or postgres://", storeURL)
	}
	leases = opts.Stores.Leases
	sys, err = berth.New(ctx, opts)
	if err != nil {
		return nil, nil, nil, errors.Join(fmt.Errorf("benchload: %w", err), closeDB())
	}
	// The workloads hold more live leases of one company than the
	// instance's default lease quotas allow: the bench's instance has none.
	none := 0
	if _, err := sys.Settings().Update(ctx, operator, instance.AnyRevision, func(c *instance.Settings) error {
		c.QuotaPerCompany = none
		c.QuotaPerCompanyEnvironment = none
		return nil
	}); err != nil {
		return nil, nil, nil, errors.Join(fmt.Errorf("benchload: lifting the lease quotas: %w", err), sys.Close(), closeDB())
	}
	return sys, leases, func() error { return errors.Join(sys.Close(), closeDB()) }, nil
}

// NewEnvironment saves a new environment of the fake driver (named name
// and a random suffix) in sys's catalog and returns its id.
func NewEnvironment(ctx context.Context, sys *berth.System, name string) (string, error) {
	v, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{
		Name: name + "-" + randomHex(4), Driver: fake.Name, Config: map[string]any{},
	})
	if err != nil {
		return "", fmt.Errorf("benchload: environment %s: %w", name, err)
	}
	return v.ID, nil
}

// AcquireRelease runs workers goroutines on sys for dur (after a warm-up
// of dur/2, as every workload here), each acquiring an ephemeral lease of
// a new fake environment (a new run each time) and releasing it with
// drivers.Destroy: the lease manager's cost per cycle on
// sys's store (write-ahead record, provider id, active, claim, release,
// receipt). sys needs the fake driver (OpenSystem). ctx is passed to every
// call; a ctx that never ends lets the manager run each acquisition in
// the caller's goroutine. The first failed call ends the run with its
// error.
func AcquireRelease(ctx context.Context, sys *berth.System, workers int, dur time.Duration) (Result, error) {
	env, err := NewEnvironment(ctx, sys, "acquire-release")
	if err != nil {
		return Result{}, err
	}
	prefix := "run-" + randomHex(4) + "-"
	var seq atomic.Int64
	r, err := run(workers, dur, func(int) error {
		return cycle(ctx, sys, env, prefix+fmt.Sprint(seq.Add(1)))
	})
	r.Workload, r.Replicas = "acquire_release", 1
	return r, err
}

// DriverCycles is the anchor of AcquireRelease: workers goroutines acquire
// and destroy sandboxes of fk directly for dur, with the labels the lease
// manager puts on them.
func DriverCycles(ctx context.Context, fk *fake.Driver, workers int, dur time.Duration) (Result, error) {
	cfg, err := fk.Schema().Normalize(map[string]any{})
	if err != nil {
		return Result{}, err
	}
	r, err := run(workers, dur, func(int) error {
		sb, err := fk.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "anchor",
			Labels: map[string]string{"berth.instance": InstanceID, "berth.environment": "anchor", "berth.lease": "anchor"}})
		if err != nil {
			return err
		}
		_, err = sb.Release(ctx, drivers.Destroy)
		return err
	})
	r.Workload, r.Replicas = "driver", 1
	return r, err
}

// cycle is one ephemeral acquire+release of env for run.
func cycle(ctx context.Context, sys *berth.System, env, run string) error {
	h, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: Company, EnvironmentID: env, Run: run})
	if err != nil {
		return fmt.Errorf("benchload: acquire: %w", err)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		return fmt.Errorf("benchload: release %s: %w", h.ID(), err)
	}
	return nil
}

// run runs workers goroutines calling op for a warm-up of dur/2 and then
// for dur, or until one fails, and measures the dur after the warm-up:
// the cycles finished then and the process's CPU then. The warm-up leaves
// out what a process pays once (connections opened, statements prepared,
// caches filled, the first sweeps) so that the figure is the steady rate.
func run(workers int, dur time.Duration, op func(worker int) error) (Result, error) {
	workers = max(workers, 1)
	var ops atomic.Int64
	var stop atomic.Bool
	var once sync.Once
	var first error
	from := time.Now().Add(dur / 2)
	deadline := from.Add(dur)
	var cpu0 atomic.Int64
	measuring := time.AfterFunc(time.Until(from), func() { cpu0.Store(int64(cpuTime())) })
	defer measuring.Stop()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !stop.Load() && time.Now().Before(deadline) {
				if err := op(w); err != nil {
					once.Do(func() { first = err })
					stop.Store(true)
					return
				}
				if !time.Now().Before(from) {
					ops.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cpu := time.Duration(0)
	if c := cpu0.Load(); c != 0 {
		cpu = cpuTime() - time.Duration(c)
	}
	return measured(workers, int(ops.Load()), max(time.Since(from), 0), cpu), first
}

func measured(workers, ops int, elapsed, cpu time.Duration) Result {
	r := Result{Workers: workers, Ops: ops, Elapsed: elapsed}
	if elapsed > 0 {
		r.OpsPerSec = float64(ops) / elapsed.Seconds()
	}
	if ops > 0 {
		r.CPUPerOp = cpu / time.Duration(ops)
	}
	return r
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
