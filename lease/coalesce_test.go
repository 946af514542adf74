package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// TestCoalescedCallersCancelAlone (issue 12 item 2, LEASE-8): callers
// coalesced onto one acquisition each wait on their own context. Whichever
// caller gives up returns at once with its context's error, while the
// shared acquisition (on the fake clock, no timing) goes on and the other
// caller gets the lease; one sandbox is made.
func TestCoalescedCallersCancelAlone(t *testing.T) {
	t.Parallel()
	for _, cancelFirst := range []bool{true, false} {
		name := map[bool]string{true: "the first caller cancels", false: "the second caller cancels"}[cancelFirst]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const delay = 30 * time.Second // the start waits for the test to advance the fake clock
			w := newWorld(t, worldOpts{startDelay: delay})
			joined := make(chan string, 2)
			lease.SetJoinHook(w.m, func(key string) { joined <- key })

			type outcome struct {
				h   *lease.Handle
				err error
			}
			acquire := func(ctx context.Context) <-chan outcome {
				req := w.req(lease.Ephemeral, "run-1") // one run key: coalesced
				ch := make(chan outcome, 1)
				go func() {
					h, err := w.m.Acquire(ctx, op, req)
					ch <- outcome{h, err}
				}()
				return ch
			}
			ctx1, cancel1 := context.WithCancel(bg)
			defer cancel1()
			ctx2, cancel2 := context.WithCancel(bg)
			defer cancel2()
			first := acquire(ctx1)
			<-joined
			if !w.fkw.waitFor(1, nil) { // the shared start waits on the clock
				t.Fatal("the provider never started")
			}
			second := acquire(ctx2)
			<-joined // both callers are in the same flight, which cannot end yet

			gaveUp, stays := first, second
			cancel := cancel1
			if !cancelFirst {
				gaveUp, stays, cancel = second, first, cancel2
			}
			cancel()
			// Returns before the clock moves: the shared start is still
			// waiting, so a caller tied to it would block here forever.
			o := <-gaveUp
			if !errors.Is(o.err, context.Canceled) || o.h != nil {
				t.Fatalf("the cancelled caller: %v, %v; want context.Canceled", o.h, o.err)
			}
			w.clk.Advance(delay)
			o = <-stays
			if o.err != nil {
				t.Fatalf("the caller that stayed: %v, want the lease", o.err)
			}
			if l := w.get(o.h.ID()); l.Status != lease.StatusActive {
				t.Errorf("lease %s is %s, want active", l.ID, l.Status)
			}
			if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
				t.Errorf("%d creates, want 1", n)
			}
		})
	}
}
