// Package clock abstracts time so that timing behaviour (startup budgets,
// slow starts, retries, expiry) can be driven deterministically, without
// sleeps.
//
//	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
//	go work(clk)                 // waits on clock.At(clk, deadline)
//	clk.WaitForWaiters(1, nil)   // work is waiting now
//	clk.Advance(5 * time.Minute) // its timer fires; nothing slept
//
// Real is the wall clock; Fake moves only when its owner advances it.
// berth's own packages take a Clock through their internal hooks, so that
// berth's own tests run the lease manager's and the fake driver's time on
// one Fake; no host or driver author passes one. It imports nothing of
// berth (floor 0).
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the clock's current time.
	Now() time.Time
	// After returns a channel that receives the clock's time once d has
	// passed on this clock; a non-positive d fires at once. The channel is
	// buffered: the timer never blocks on an absent reader.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock. The zero value is ready to use.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a manual clock: its time changes only through Advance.
// It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	changed chan struct{} // closed and replaced whenever waiters change
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

var (
	_ Clock = Real{}
	_ Clock = (*Fake)(nil)
)

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t, changed: make(chan struct{})} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that fires when the fake time reaches Now()+d. A
// non-positive d fires at once.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.afterAtLocked(f.now.Add(d))
}

// afterAt returns a channel that fires when the fake time reaches deadline;
// a deadline not after Now() fires at once. Unlike After it does not depend
// on when the caller read the time (At uses it).
func (f *Fake) afterAt(deadline time.Time) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.afterAtLocked(deadline)
}

func (f *Fake) afterAtLocked(at time.Time) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if !at.After(f.now) {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: at, ch: ch})
	f.notifyLocked()
	return ch
}

// Advance moves the fake time forward by d (a negative d is ignored) and
// fires, in deadline order, every timer that is due.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// set moves the fake time to t if t is later than Now() (time never runs
// backwards) and fires every timer that is due.
func (f *Fake) set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.setLocked(t)
	}
}

func (f *Fake) setLocked(t time.Time) {
	f.now = t
	sort.SliceStable(f.waiters, func(i, j int) bool { return f.waiters[i].at.Before(f.waiters[j].at) })
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- f.now
			continue
		}
		kept = append(kept, w)
	}
	clear(f.waiters[len(kept):])
	f.waiters = kept
	f.notifyLocked()
}

// pending returns the number of timers not yet fired.
func (f *Fake) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// WaitForWaiters blocks until at least n timers are pending, so that the
// owner can advance the clock only after the code it drives started
// waiting. It returns false if done is closed first (a nil done never is).
func (f *Fake) WaitForWaiters(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		if len(f.waiters) >= n {
			f.mu.Unlock()
			return true
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// afterAter is implemented by clocks that can fire at an absolute time
// (Fake does). At prefers it: an After(deadline - Now()) computed just
// before another goroutine moves a Fake would wait a whole interval too
// long.
type afterAter interface {
	afterAt(deadline time.Time) <-chan time.Time
}

// At returns a channel that fires when c reaches deadline. Code that waits
// for a deadline should use it rather than c.After(deadline - c.Now()):
// on a Fake it fires exactly when the fake time reaches deadline, even
// when another goroutine moves the clock between the two reads.
func At(c Clock, deadline time.Time) <-chan time.Time {
	if a, ok := c.(afterAter); ok {
		return a.afterAt(deadline)
	}
	return c.After(deadline.Sub(c.Now()))
}
