package daytona

import (
	"context"
	"errors"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/retry"
)

// backoff retries transient provider failures (LEASE-3) through
// internal/retry: jittered exponential backoff inside the caller's deadline,
// only errors wrapping drivers.ErrTransient are retried, a provider's
// Retry-After (see apiError) is honoured as the least wait, and no retry is
// started that could not finish before the deadline (the error then wraps
// retry.ErrNoTimeLeft).
type backoff struct{ policy retry.Policy }

// newBackoff returns a backoff whose first delay is base, doubling up to max.
func newBackoff(base, max time.Duration, clk clock.Clock) backoff {
	return backoff{policy: retry.Policy{Initial: base, Max: max, Clock: clk, MinDelay: retryAfter}}
}

// retryAfter is the wait a provider asked for in its Retry-After header.
func retryAfter(err error) time.Duration {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.retryAfter
	}
	return 0
}

// do runs op until it succeeds or fails with a non-transient error, retrying
// transient failures while the deadline allows. The returned error wraps
// op's last error.
func (b backoff) do(ctx context.Context, op func(context.Context) error) error {
	return retry.Do(ctx, b.policy, func(ctx context.Context, _ int) error { return op(ctx) })
}
