package daytona

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/berthdev/berth/drivers"
)

// backoff is jittered exponential backoff bounded by the context's deadline
// (LEASE-3): only errors wrapping drivers.ErrTransient are retried, one
// deadline is shared by all attempts, and no retry is started that cannot
// finish before the deadline. The estimate of an attempt's length is the
// length of the attempt that just failed.
type backoff struct {
	base time.Duration // first delay; later delays double
	max  time.Duration // cap on one delay (before the provider's Retry-After)
}

// delay returns the jittered delay before retry number attempt (0-based):
// uniformly drawn from [d/2, d] where d = min(max, base*2^attempt).
func (b backoff) delay(attempt int) time.Duration {
	d := b.base
	for i := 0; i < attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// errNoTimeToRetry marks a transient error that was not retried because the
// next attempt could not have finished before the deadline.
var errNoTimeToRetry = errors.New("no retry: the next attempt could not finish before the deadline")

// do runs op until it succeeds or fails with a non-transient error, retrying
// transient failures while the deadline allows. A provider's Retry-After
// (see apiError) is honoured as the least delay. The returned error is op's
// last error, wrapped with why retrying stopped.
func (b backoff) do(ctx context.Context, op func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := op(ctx)
		if err == nil || !errors.Is(err, drivers.ErrTransient) {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%w (%w)", err, cerr)
		}
		took := time.Since(start)
		wait := b.delay(attempt)
		var ae *apiError
		if errors.As(err, &ae) && ae.retryAfter > wait {
			wait = ae.retryAfter
		}
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(wait+took).After(dl) {
			return fmt.Errorf("%w (%w)", err, errNoTimeToRetry)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-t.C:
		}
		// A late timer must not start an attempt the deadline cannot hold.
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(took).After(dl) {
			return fmt.Errorf("%w (%w)", err, errNoTimeToRetry)
		}
	}
}
