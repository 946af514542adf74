package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/retry"
)

// stepClock is a fake clock whose After moves time on at once, so that
// backoff sleeps take no real time.
type stepClock struct {
	mu sync.Mutex
	f  *clock.Fake
}

func (c *stepClock) Now() time.Time { return c.f.Now() }

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.Advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.f.Now()
	return ch
}

// deadlineCtx reports a deadline on the fake clock without firing itself.
type deadlineCtx struct {
	context.Context
	d time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.d, true }

// LEASE-3: only transient errors are retried, within one deadline, a
// provider's Retry-After is honoured, and no retry starts that could not
// finish before the deadline. Time runs on a fake clock.
func TestBackoffDo(t *testing.T) {
	t.Parallel()
	transient := fmt.Errorf("x: %w", drivers.ErrTransient)
	tests := []struct {
		name      string
		deadline  time.Duration
		fails     int   // attempts that fail before success; -1 forever
		err       error // what a failing attempt returns
		wantCalls int   // -1: more than one
		wantErr   error
		wantNoTry bool // stopped because no retry could finish in time
	}{
		{"success at once", time.Minute, 0, transient, 1, nil, false},
		{"two transient failures then success", time.Minute, 2, transient, 3, nil, false},
		{"a non-transient error is not retried", time.Minute, -1, fmt.Errorf("x: %w", drivers.ErrAuth), 1, drivers.ErrAuth, false},
		{"not found is not retried", time.Minute, -1, fmt.Errorf("x: %w", errcode.ErrNotFound), 1, errcode.ErrNotFound, false},
		{"transient forever stops before the deadline", 150 * time.Millisecond, -1, transient, -1, drivers.ErrTransient, true},
		{"a Retry-After past the deadline is not waited for", time.Minute, -1,
			&apiError{op: "GET /x", host: "h", status: http.StatusTooManyRequests, retryAfter: time.Hour, kind: drivers.ErrTransient},
			1, drivers.ErrTransient, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &stepClock{f: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
			dl := clk.Now().Add(tc.deadline)
			ctx := deadlineCtx{context.Background(), dl}
			calls := 0
			b := newBackoff(5*time.Millisecond, 40*time.Millisecond, clk)
			err := b.do(ctx, func(ctx context.Context) error {
				calls++
				clk.f.Advance(2 * time.Millisecond) // each attempt takes time
				if clk.Now().After(dl) {
					t.Errorf("attempt %d ran past the deadline", calls)
				}
				if tc.fails < 0 || calls <= tc.fails {
					return tc.err
				}
				return nil
			})
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got := errors.Is(err, retry.ErrNoTimeLeft); got != tc.wantNoTry {
				t.Errorf("stopped for lack of time = %v, want %v (err %v)", got, tc.wantNoTry, err)
			}
			if tc.wantNoTry && clk.Now().After(dl) {
				t.Errorf("do returned after the deadline instead of giving up before it")
			}
			if tc.wantCalls >= 0 && calls != tc.wantCalls || tc.wantCalls < 0 && calls < 2 {
				t.Errorf("%d attempts, want %d", calls, tc.wantCalls)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"-1", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
