package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// LEASE-3: only transient errors are retried, within one deadline, and no
// retry starts that could not finish before it.
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
		{"not found is not retried", time.Minute, -1, fmt.Errorf("x: %w", drivers.ErrNotFound), 1, drivers.ErrNotFound, false},
		{"transient forever stops before the deadline", 150 * time.Millisecond, -1, transient, -1, drivers.ErrTransient, true},
		{"a Retry-After past the deadline is not waited for", time.Minute, -1,
			&apiError{op: "GET /x", host: "h", status: http.StatusTooManyRequests, retryAfter: time.Hour, kind: drivers.ErrTransient},
			1, drivers.ErrTransient, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			dl, _ := ctx.Deadline()
			calls := 0
			b := backoff{base: 5 * time.Millisecond, max: 40 * time.Millisecond}
			err := b.do(ctx, func(ctx context.Context) error {
				calls++
				// 10ms of slack for the scheduler between the decision and the call.
				if time.Now().After(dl.Add(10 * time.Millisecond)) {
					t.Errorf("attempt %d started after the deadline", calls)
				}
				if tc.fails < 0 || calls <= tc.fails {
					return tc.err
				}
				return nil
			})
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got := errors.Is(err, errNoTimeToRetry); got != tc.wantNoTry {
				t.Errorf("stopped for lack of time = %v, want %v (err %v)", got, tc.wantNoTry, err)
			}
			if tc.wantNoTry && ctx.Err() != nil {
				t.Errorf("do returned after the deadline instead of giving up before it")
			}
			if tc.wantCalls >= 0 && calls != tc.wantCalls || tc.wantCalls < 0 && calls < 2 {
				t.Errorf("%d attempts, want %d", calls, tc.wantCalls)
			}
		})
	}
}

func TestBackoffDelayIsJitteredAndCapped(t *testing.T) {
	t.Parallel()
	b := backoff{base: 100 * time.Millisecond, max: time.Second}
	for attempt, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		for range 50 {
			if d := b.delay(attempt); d < want/2 || d > want {
				t.Fatalf("delay(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
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
