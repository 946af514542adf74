// Package leasetune holds the lease manager's knobs that no host sets:
// its randomness, lease ids, budgets, TTLs and the pacing of
// retries, polls, sweeps, heartbeats and pool refills. berth.New leaves
// them at their defaults (see lease.Options); berth's own tests set them
// on a lease.Options with internal/leasehook.Tune to run the manager in
// fake time and in step. There is no package state.
package leasetune

import "time"

// Knobs are the manager's internal knobs. A zero field means its default.
type Knobs struct {
	// Rand returns uniform numbers in [0, 1) for backoff jitter. Default
	// math/rand/v2.
	Rand func() float64
	// NewID returns a new lease id. Default "lse_" and 16 random hex digits.
	NewID func() string
	// StartupBudget is used when neither the request, the environment's
	// startup_timeout knob nor the driver declares a budget (LEASE-3).
	// Default 5 minutes.
	StartupBudget time.Duration
	// LeaseTTL is how long an active lease lives without being acquired
	// again before a sweep expires it. Default 24 hours.
	LeaseTTL time.Duration
	// ResumableTTL is how long a retained or stopped (resumable) lease
	// stays resumable before a sweep expires it. Default 7 days.
	ResumableTTL time.Duration
	// CleanupBudget bounds one stop, destroy or listing done for cleanup.
	// Default one minute.
	CleanupBudget time.Duration
	// RetryInitial and RetryMax shape the backoff between attempts; zero
	// means the internal/retry defaults (200ms, 10s).
	RetryInitial, RetryMax time.Duration
	// PollInterval is how often (wall clock) an acquisition re-reads a
	// lease that another manager is starting or holds a claim on, at most:
	// the first re-reads come sooner (a sixteenth of it, at least 1 ms,
	// doubling up to it). Default 20 ms.
	PollInterval time.Duration
	// SweepLimit bounds the leases one Sweep claims. Default 100.
	SweepLimit int
	// HostHeartbeat is how often (on leasehook.Sources.Clock) the manager that holds a host
	// lease's live session renews its claim on it (Lease.Holder); the
	// claim lasts three heartbeats. Default 10 seconds.
	HostHeartbeat time.Duration
	// PoolConcurrency bounds the members one environment's pool starts at
	// once (a refill, MaintainPools). Default 2.
	PoolConcurrency int
}

// Update calls f with *knobs for f to change, allocating it first when it
// is nil. Package lease keeps the knobs of a lease.Options in an
// unexported field that leasehook.Tune fills with it: berth's tests write
//
//	leasehook.Tune(opts, func(k *leasetune.Knobs) { k.LeaseTTL = time.Hour })
func Update(knobs **Knobs, f func(*Knobs)) {
	if *knobs == nil {
		*knobs = new(Knobs)
	}
	f(*knobs)
}
