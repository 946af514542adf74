package lease

import (
	"context"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/retry"
)

// budgetCtx is a context that ends at a deadline on the manager's clock,
// or when its cancel is called. Over a parent that never ends (its Done is
// nil) it starts no timer until someone asks for its Done channel (or
// registers an AfterFunc, as a context derived from it does): until then
// Err compares the clock with the deadline. Most budgets of a lease's
// life (the shared acquisition's bound, the startup budget, the cleanup
// budget) end unused within microseconds on fast stores and drivers, and a
// timer each was a fifth of the manager's allocations.
type budgetCtx struct {
	m        *Manager        // whose clock (m.o.clock) measures the deadline
	parent   context.Context // Done() == nil, unless inner is set from the start
	deadline time.Time

	mu     sync.Mutex
	inner  context.Context    // the timer context, once started
	stop   context.CancelFunc // inner's cancel
	err    error              // the end reached before inner was started
	closed chan struct{}      // Done of a context that ended unstarted
}

// withBudget returns ctx bounded by deadline on m's clock, as
// retry.WithDeadline does. It starts no timer (see budgetCtx) when ctx
// never ends, or when ctx is an unstarted budgetCtx of m that ends no
// earlier than deadline: that one can end nothing the new context must
// see, and its values are its parent's. Otherwise the returned context
// wraps retry.WithDeadline(ctx, ...). The caller must call its cancel
// (a method, which spares the allocation of a CancelFunc).
func (m *Manager) withBudget(ctx context.Context, deadline time.Time) *budgetCtx {
	parent := ctx
	if b, ok := ctx.(*budgetCtx); ok && b.m == m && !b.deadline.Before(deadline) && b.idle() {
		parent = b.parent
	}
	b := &budgetCtx{m: m, parent: parent, deadline: deadline}
	if parent.Done() != nil {
		b.inner, b.stop = retry.WithDeadline(parent, m.o.clock, deadline)
	}
	return b
}

// idle reports whether b has neither ended nor started its timer.
func (b *budgetCtx) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inner == nil && b.err == nil && b.m.o.clock.Now().Before(b.deadline)
}

func (b *budgetCtx) Deadline() (time.Time, bool) { return b.deadline, true }

// Value is the parent's, or once the timer started its context's: that
// one is a cancelCtx, which a derived context then joins directly.
func (b *budgetCtx) Value(key any) any {
	b.mu.Lock()
	inner := b.inner
	b.mu.Unlock()
	if inner != nil {
		return inner.Value(key)
	}
	return b.parent.Value(key)
}

// Done starts the timer (retry.WithDeadline over the parent) on first use.
func (b *budgetCtx) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.doneLocked()
}

func (b *budgetCtx) doneLocked() <-chan struct{} {
	if b.inner != nil {
		return b.inner.Done()
	}
	if b.err == nil && !b.m.o.clock.Now().Before(b.deadline) {
		b.err = context.DeadlineExceeded
	}
	if b.err != nil {
		if b.closed == nil {
			b.closed = make(chan struct{})
			close(b.closed)
		}
		return b.closed
	}
	b.inner, b.stop = retry.WithDeadline(b.parent, b.m.o.clock, b.deadline)
	return b.inner.Done()
}

func (b *budgetCtx) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.inner != nil:
		return b.inner.Err()
	case b.err != nil:
		return b.err
	case !b.m.o.clock.Now().Before(b.deadline):
		b.err = context.DeadlineExceeded
		return b.err
	}
	return nil
}

// AfterFunc lets a context derived from b (context.WithCancel and friends)
// follow it without a goroutine of its own: it starts b's timer.
func (b *budgetCtx) AfterFunc(f func()) func() bool {
	b.mu.Lock()
	b.doneLocked()
	inner := b.inner
	b.mu.Unlock()
	if inner == nil {
		// Ended before it was started: run f now, as context.AfterFunc
		// does for a context that is already done.
		go f()
		return func() bool { return false }
	}
	return context.AfterFunc(inner, f)
}

// cancel ends b (context.Canceled, unless its deadline passed first) and
// stops its timer.
func (b *budgetCtx) cancel() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inner != nil {
		b.stop()
		return
	}
	if b.err == nil {
		b.err = context.Canceled
		if !b.m.o.clock.Now().Before(b.deadline) {
			b.err = context.DeadlineExceeded
		}
	}
}
