package retry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/clock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// autoClock is a fake clock whose After advances time at once by d, so that
// Do's sleeps take no real time and are recorded.
type autoClock struct {
	mu     sync.Mutex
	f      *clock.Fake
	sleeps []time.Duration
}

func (c *autoClock) Now() time.Time { return c.f.Now() }

func (c *autoClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	c.f.Advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.f.Now()
	return ch
}

// deadlineCtx reports a deadline without ever firing on its own.
type deadlineCtx struct {
	context.Context
	d time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.d, true }

var errOther = errors.New("permanent")

func transient(n int) error { return fmt.Errorf("attempt %d: %w", n, drivers.ErrTransient) }

func TestDo(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name string
		// failures: the error of each attempt in order; after them, success.
		failures   []error
		policy     Policy
		deadline   time.Duration // 0: no deadline
		attemptDur time.Duration // each attempt advances the clock by this
		wantErr    []error       // errors.Is targets; nil: success
		wantSame   bool          // the error is the last attempt's error itself
		attempts   int
		sleeps     []time.Duration
	}{
		{name: "first attempt succeeds", attempts: 1, sleeps: nil},
		{
			name:     "transient errors are retried with exponential backoff",
			failures: []error{transient(1), transient(2)},
			attempts: 3, sleeps: []time.Duration{200 * ms, 400 * ms},
		},
		{
			name:     "a non-transient error is returned unchanged at once",
			failures: []error{errOther},
			wantErr:  []error{errOther}, wantSame: true, attempts: 1,
		},
		{
			name:     "a caller classifier replaces the default",
			failures: []error{errOther, errOther},
			policy:   Policy{Retryable: func(err error) bool { return errors.Is(err, errOther) }},
			attempts: 3, sleeps: []time.Duration{200 * ms, 400 * ms},
		},
		{
			name:     "no retry is started whose sleep runs past the deadline (LEASE-3)",
			failures: []error{transient(1), transient(2), transient(3), transient(4)},
			deadline: time.Second,
			wantErr:  []error{ErrNoTimeLeft, drivers.ErrTransient},
			attempts: 3, sleeps: []time.Duration{200 * ms, 400 * ms},
		},
		{
			name:     "the attempt estimate counts against the deadline (LEASE-3)",
			failures: []error{transient(1), transient(2)},
			policy:   Policy{AttemptEstimate: 500 * ms},
			deadline: time.Second,
			wantErr:  []error{ErrNoTimeLeft, drivers.ErrTransient},
			attempts: 2, sleeps: []time.Duration{200 * ms},
		},
		{
			name:       "the longest observed attempt is the default estimate (LEASE-3)",
			failures:   []error{transient(1), transient(2)},
			deadline:   time.Second,
			attemptDur: 300 * ms,
			wantErr:    []error{ErrNoTimeLeft},
			attempts:   2, sleeps: []time.Duration{200 * ms},
		},
		{
			name:     "max attempts bounds the retries",
			failures: []error{transient(1), transient(2), transient(3), transient(4)},
			policy:   Policy{MaxAttempts: 3},
			wantErr:  []error{ErrAttemptsExhausted, drivers.ErrTransient},
			attempts: 3, sleeps: []time.Duration{200 * ms, 400 * ms},
		},
		{
			name:     "backoff is capped by Max",
			failures: []error{transient(1), transient(2), transient(3)},
			policy:   Policy{Initial: time.Second, Max: 1500 * ms, Multiplier: 3},
			attempts: 4, sleeps: []time.Duration{time.Second, 1500 * ms, 1500 * ms},
		},
		{
			name:     "jitter shortens the sleep by up to the jitter fraction",
			failures: []error{transient(1)},
			policy:   Policy{Rand: func() float64 { return 0.5 }},
			attempts: 2, sleeps: []time.Duration{150 * ms},
		},
		{
			name:     "negative jitter disables it",
			failures: []error{transient(1)},
			policy:   Policy{Jitter: -1, Rand: func() float64 { return 0.9 }},
			attempts: 2, sleeps: []time.Duration{200 * ms},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := &autoClock{f: clock.NewFake(t0)}
			p := tt.policy
			p.Clock = clk
			if p.Rand == nil {
				p.Rand = func() float64 { return 0 }
			}
			var ctx context.Context = context.Background()
			if tt.deadline > 0 {
				ctx = deadlineCtx{Context: ctx, d: t0.Add(tt.deadline)}
			}
			attempts := 0
			var last error
			err := Do(ctx, p, func(ctx context.Context, n int) error {
				attempts++
				if n != attempts {
					t.Errorf("attempt number %d, want %d", n, attempts)
				}
				clk.f.Advance(tt.attemptDur)
				if n <= len(tt.failures) {
					last = tt.failures[n-1]
					return last
				}
				return nil
			})
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Do: %v, want success", err)
			}
			for _, target := range tt.wantErr {
				if !errors.Is(err, target) {
					t.Errorf("Do error %v does not wrap %v", err, target)
				}
			}
			if tt.wantSame && err != last {
				t.Errorf("Do error %v, want the attempt's error unchanged", err)
			}
			if attempts != tt.attempts {
				t.Errorf("attempts = %d, want %d", attempts, tt.attempts)
			}
			if diff := cmp.Diff(tt.sleeps, clk.sleeps); diff != "" {
				t.Errorf("sleeps (-want +got):\n%s", diff)
			}
			if tt.deadline > 0 && clk.Now().After(t0.Add(tt.deadline)) {
				t.Errorf("clock at %s after Do, past the deadline", clk.Now().Sub(t0))
			}
		})
	}
}

// cancelClock cancels a context when a sleep starts and never fires.
type cancelClock struct {
	clock.Fake
	cancel context.CancelFunc
}

func (c *cancelClock) After(time.Duration) <-chan time.Time {
	c.cancel()
	return nil
}

func TestDoHonoursCancellation(t *testing.T) {
	t.Parallel()
	t.Run("during the backoff sleep", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		clk := &cancelClock{Fake: *clock.NewFake(t0), cancel: cancel}
		n := 0
		err := Do(ctx, Policy{Clock: clk}, func(context.Context, int) error { n++; return transient(n) })
		if !errors.Is(err, context.Canceled) || !errors.Is(err, drivers.ErrTransient) {
			t.Errorf("Do: %v, want context.Canceled and the last error", err)
		}
		if n != 1 {
			t.Errorf("attempts = %d, want 1", n)
		}
	})
	t.Run("during an attempt", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		err := Do(ctx, Policy{Clock: &autoClock{f: clock.NewFake(t0)}}, func(context.Context, int) error {
			n++
			cancel()
			return transient(n)
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Do: %v, want context.Canceled", err)
		}
		if n != 1 {
			t.Errorf("attempts = %d, want 1", n)
		}
	})
	// A retry whose attempt the context's end cut short (its error is the
	// context's, not retryable) still reads as the transient failure that
	// made it a retry; a first attempt cut short does not.
	t.Run("a retry cut short by the deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		err := Do(ctx, Policy{Clock: &autoClock{f: clock.NewFake(t0)}}, func(ctx context.Context, _ int) error {
			n++
			if n == 1 {
				return transient(n)
			}
			cancel()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, drivers.ErrTransient) {
			t.Errorf("Do: %v, want context.Canceled and the transient failure before it", err)
		}
		ctx2, cancel2 := context.WithCancel(context.Background())
		err = Do(ctx2, Policy{Clock: &autoClock{f: clock.NewFake(t0)}}, func(ctx context.Context, _ int) error {
			cancel2()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, drivers.ErrTransient) {
			t.Errorf("Do of a first attempt cut short: %v, want context.Canceled alone", err)
		}
	})
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	zero := func() float64 { return 0 }
	tests := []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"defaults first", Policy{Rand: zero}, 1, DefaultInitial},
		{"defaults third", Policy{Rand: zero}, 3, 4 * DefaultInitial},
		{"n below one is one", Policy{Rand: zero}, 0, DefaultInitial},
		{"capped", Policy{Rand: zero}, 60, DefaultMax},
		{"full jitter fraction", Policy{Rand: func() float64 { return 0.5 }, Jitter: 1}, 1, DefaultInitial / 2},
		{"out of range rand is ignored", Policy{Rand: func() float64 { return 7 }}, 1, DefaultInitial},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.p.Backoff(tt.n); got != tt.want {
				t.Errorf("Backoff(%d) = %s, want %s", tt.n, got, tt.want)
			}
		})
	}
}

func TestWithDeadline(t *testing.T) {
	t.Parallel()
	t.Run("fires when the fake clock reaches the deadline", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(t0)
		ctx, cancel := WithTimeout(context.Background(), clk, 5*time.Second)
		defer cancel()
		if d, ok := ctx.Deadline(); !ok || !d.Equal(t0.Add(5*time.Second)) {
			t.Errorf("Deadline() = %v, %v; want %v", d, ok, t0.Add(5*time.Second))
		}
		clk.WaitForWaiters(1, nil)
		clk.Advance(4 * time.Second)
		if ctx.Err() != nil {
			t.Fatalf("done before the deadline: %v", ctx.Err())
		}
		clk.Advance(time.Second)
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("Err() = %v, want DeadlineExceeded", ctx.Err())
		}
	})
	t.Run("cancel makes it Canceled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := WithTimeout(context.Background(), clock.NewFake(t0), time.Second)
		cancel()
		<-ctx.Done()
		if ctx.Err() != context.Canceled {
			t.Errorf("Err() = %v, want Canceled", ctx.Err())
		}
	})
	t.Run("parent cancellation propagates", func(t *testing.T) {
		t.Parallel()
		parent, pcancel := context.WithCancel(context.Background())
		ctx, cancel := WithTimeout(parent, clock.NewFake(t0), time.Second)
		defer cancel()
		pcancel()
		<-ctx.Done()
		if ctx.Err() != context.Canceled {
			t.Errorf("Err() = %v, want Canceled", ctx.Err())
		}
	})
	t.Run("real clock uses the standard deadline", func(t *testing.T) {
		t.Parallel()
		d := time.Now().Add(time.Hour)
		ctx, cancel := WithDeadline(context.Background(), clock.Real{}, d)
		defer cancel()
		if got, ok := ctx.Deadline(); !ok || !got.Equal(d) {
			t.Errorf("Deadline() = %v, %v; want %v", got, ok, d)
		}
	})
}

// TestMinDelay: a provider's requested wait raises the backoff, and a wait
// that cannot end before the deadline is not waited for (LEASE-3).
func TestMinDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		min       time.Duration
		deadline  time.Duration
		wantSleep []time.Duration
		wantErr   error
	}{
		{"raised to the provider's wait", 3 * time.Second, time.Minute, []time.Duration{3 * time.Second}, nil},
		{"a wait past the deadline is not started", time.Hour, time.Minute, nil, ErrNoTimeLeft},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &autoClock{f: clock.NewFake(t0)}
			ctx := deadlineCtx{context.Background(), t0.Add(tc.deadline)}
			calls := 0
			err := Do(ctx, Policy{Clock: clk, Initial: time.Millisecond, Jitter: -1,
				MinDelay: func(error) time.Duration { return tc.min }},
				func(context.Context, int) error {
					calls++
					if calls == 1 {
						return transient(1)
					}
					return nil
				})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Do: %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantSleep, clk.sleeps); diff != "" {
				t.Errorf("sleeps (-want +got):\n%s", diff)
			}
		})
	}
}

// notTransient says it is not transient, whatever it wraps.
type notTransient struct{ err error }

func (e notTransient) Error() string   { return "not transient: " + e.err.Error() }
func (e notTransient) Unwrap() error   { return e.err }
func (e notTransient) Transient() bool { return false }

// Issue 13 item 2: the default classifier knows drivers.ErrTransient by its
// Transient method, without this package importing drivers; the first error
// in the chain with the method decides.
func TestIsTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"drivers.ErrTransient", drivers.ErrTransient, true},
		{"wrapped", fmt.Errorf("daytona: 503: %w", drivers.ErrTransient), true},
		{"joined", errors.Join(errors.New("x"), fmt.Errorf("y: %w", drivers.ErrTransient)), true},
		{"another sentinel", fmt.Errorf("ssh: %w", drivers.ErrAuth), false},
		{"plain", errors.New("transient failure"), false},
		{"overridden by an outer error", notTransient{fmt.Errorf("x: %w", drivers.ErrTransient)}, false},
		{"nil", nil, false},
	} {
		if got := IsTransient(tc.err); got != tc.want {
			t.Errorf("%s: IsTransient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", drivers.ErrTransient), drivers.ErrTransient) || errors.Is(drivers.ErrTransient, drivers.ErrAuth) {
		t.Error("drivers.ErrTransient no longer compares as a sentinel")
	}
}
