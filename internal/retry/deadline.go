package retry

import (
	"context"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

// WithDeadline returns a context that is done when parent is done or when
// clk reaches deadline, whichever comes first. Its Deadline method reports
// deadline (measured on clk, which may be a fake clock), and after the
// deadline passes its Err is context.DeadlineExceeded. For clock.Real (or a
// nil clk) it is context.WithDeadline. The caller must call cancel.
func WithDeadline(parent context.Context, clk clock.Clock, deadline time.Time) (context.Context, context.CancelFunc) {
	if clk == nil {
		clk = clock.Real{}
	}
	if _, ok := clk.(clock.Real); ok {
		return context.WithDeadline(parent, deadline)
	}
	inner, cancel := context.WithCancelCause(parent)
	ctx := &clockDeadlineCtx{Context: inner, deadline: deadline}
	go func() {
		for {
			d := deadline.Sub(clk.Now())
			if d <= 0 {
				cancel(context.DeadlineExceeded)
				return
			}
			ch := clk.After(d)
			// The clock may have moved between Now and After; a timer
			// registered after the deadline passed would never fire.
			if !clk.Now().Before(deadline) {
				cancel(context.DeadlineExceeded)
				return
			}
			select {
			case <-ch: // re-check: a fake clock may fire early timers only
			case <-inner.Done():
				return
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// WithTimeout is WithDeadline(parent, clk, clk.Now().Add(d)).
func WithTimeout(parent context.Context, clk clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if clk == nil {
		clk = clock.Real{}
	}
	return WithDeadline(parent, clk, clk.Now().Add(d))
}

type clockDeadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *clockDeadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *clockDeadlineCtx) Err() error {
	err := c.Context.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(c.Context); cause == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}
