// Package retry runs an operation again after transient failures, with
// jittered exponential backoff, inside one deadline shared by every attempt
// (LEASE-3).
//
//	p := retry.Policy{Initial: 250 * time.Millisecond, Clock: clk}
//	err := retry.Do(ctx, p, func(ctx context.Context, attempt int) error {
//		return create(ctx) // retried while it is transient
//	})
//	if errors.Is(err, retry.ErrNoTimeLeft) { ... } // the deadline won
//
// Do and Policy are the entry points. A retry is started only when the
// backoff sleep plus the expected duration of one attempt still ends before
// the deadline; a sleep never runs past it. Time comes from an injectable
// clock.Clock and jitter from an injectable random source, so tests are
// deterministic and never sleep. WithDeadline makes a context whose
// deadline is measured on such a clock.
//
// The caller classifies errors with Policy.Retryable. The default classifier,
// IsTransient, retries errors that say they are transient through a
// Transient() bool method anywhere in their chain, as drivers.ErrTransient
// does; so this package imports no berth package but clock.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

// Defaults of Policy's zero fields.
const (
	DefaultInitial    = 200 * time.Millisecond
	DefaultMax        = 10 * time.Second
	DefaultMultiplier = 2.0
	DefaultJitter     = 0.5
)

// ErrNoTimeLeft is wrapped by Do's error when it stops because the next
// attempt could not finish before the deadline.
var ErrNoTimeLeft = errors.New("retry: no time left before the deadline")

// ErrAttemptsExhausted is wrapped by Do's error when Policy.MaxAttempts
// attempts all failed with retryable errors.
var ErrAttemptsExhausted = errors.New("retry: attempts exhausted")

// Policy configures Do. The zero Policy is usable: it retries transient
// errors (IsTransient; drivers.ErrTransient is one) until the context's
// deadline, with the defaults below.
type Policy struct {
	// Initial is the backoff before the second attempt. Default DefaultInitial.
	Initial time.Duration
	// Max caps one backoff. Default DefaultMax.
	Max time.Duration
	// Multiplier grows the backoff after each attempt. Default DefaultMultiplier.
	Multiplier float64
	// Jitter is the fraction of each backoff that is randomized: the sleep
	// is uniformly drawn from [b*(1-Jitter), b]. 0 means DefaultJitter; a
	// negative value disables jitter.
	Jitter float64
	// MaxAttempts bounds the number of attempts; 0 means no bound other than
	// the deadline.
	MaxAttempts int
	// AttemptEstimate is the expected duration of one attempt. A retry is
	// started only when now + backoff + estimate is not after the deadline.
	// 0 means the longest attempt observed so far in this Do call.
	AttemptEstimate time.Duration
	// Retryable classifies an attempt's error; only errors for which it
	// returns true are retried. Default IsTransient.
	Retryable func(error) bool
	// MinDelay, if not nil, returns the least wait a failed attempt asked
	// for (a provider's Retry-After); the backoff is raised to it, and the
	// deadline check uses the raised wait. Default: none.
	MinDelay func(error) time.Duration
	// Clock measures time and sleeps. Default clock.Real.
	Clock clock.Clock
	// Rand returns a uniform number in [0, 1) for jitter. Default math/rand/v2.
	Rand func() float64
}

// IsTransient reports whether an error in err's chain has a Transient() bool
// method that returns true, as drivers.ErrTransient has: the default
// classifier. The first error in the chain with the method decides.
func IsTransient(err error) bool {
	var t interface{ Transient() bool }
	return errors.As(err, &t) && t.Transient()
}

func (p Policy) withDefaults() Policy {
	if p.Initial <= 0 {
		p.Initial = DefaultInitial
	}
	if p.Max <= 0 {
		p.Max = DefaultMax
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultMultiplier
	}
	switch {
	case p.Jitter == 0:
		p.Jitter = DefaultJitter
	case p.Jitter > 1:
		p.Jitter = 1
	}
	if p.Retryable == nil {
		p.Retryable = IsTransient
	}
	if p.Clock == nil {
		p.Clock = clock.Real{}
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

// Backoff returns the sleep before attempt n+1 after n failed attempts
// (n >= 1), jitter included. It is exported for tests and for callers that
// schedule their own retries.
func (p Policy) Backoff(n int) time.Duration {
	p = p.withDefaults()
	if n < 1 {
		n = 1
	}
	b := float64(p.Initial) * math.Pow(p.Multiplier, float64(n-1))
	if b > float64(p.Max) || math.IsInf(b, 0) || math.IsNaN(b) {
		b = float64(p.Max)
	}
	r := p.Rand()
	if r < 0 || r >= 1 {
		r = 0
	}
	return time.Duration(b * (1 - max(p.Jitter, 0)*r))
}

// Do calls op until it succeeds, returns an error the policy does not retry,
// or no further attempt can finish before ctx's deadline. attempt counts from
// 1. It never sleeps past the deadline and returns promptly when ctx is done.
//
// On success Do returns nil. Otherwise the returned error wraps the last
// attempt's error (so errors.Is sees its sentinels) and, when Do gave up for
// a reason of its own, ErrNoTimeLeft, ErrAttemptsExhausted or ctx.Err().
// A non-retryable error is returned unchanged, but for one returned after
// ctx ended by a retry (the deadline cut the attempt short): that one
// also wraps the retryable failure before it, so that the error still
// reads as that failure.
func Do(ctx context.Context, p Policy, op func(ctx context.Context, attempt int) error) error {
	p = p.withDefaults()
	deadline, hasDeadline := ctx.Deadline()
	var longest time.Duration
	var last error // the last retryable failure
	for attempt := 1; ; attempt++ {
		start := p.Clock.Now()
		err := op(ctx, attempt)
		if err == nil {
			return nil
		}
		if d := p.Clock.Now().Sub(start); d > longest {
			longest = d
		}
		if !p.Retryable(err) {
			if cerr := ctx.Err(); cerr != nil && last != nil {
				// A retry the context's end cut short: the failure is
				// still the transient one that made it a retry.
				return fmt.Errorf("retry: attempt %d: %w (the attempt before: %w)", attempt, err, last)
			}
			return err
		}
		last = err
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("retry: attempt %d: %w (then: %w)", attempt, err, cerr)
		}
		if p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
			return fmt.Errorf("%w after %d attempts: %w", ErrAttemptsExhausted, attempt, err)
		}
		sleep := p.Backoff(attempt)
		if p.MinDelay != nil {
			sleep = max(sleep, p.MinDelay(err))
		}
		if hasDeadline {
			estimate := p.AttemptEstimate
			if estimate <= 0 {
				estimate = longest
			}
			if p.Clock.Now().Add(sleep).Add(estimate).After(deadline) {
				return fmt.Errorf("%w for attempt %d (backoff %s, attempt estimate %s): %w",
					ErrNoTimeLeft, attempt+1, sleep, estimate, err)
			}
		}
		select {
		case <-p.Clock.After(sleep):
		case <-ctx.Done():
			return fmt.Errorf("retry: waiting for attempt %d: %w (last error: %w)", attempt+1, ctx.Err(), err)
		}
	}
}
