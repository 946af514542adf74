package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/leasehook"
)

type budgetKey struct{}

func waitDone(t *testing.T, what string, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not done 10s after its end", what)
	}
}

// A budget over a context that never ends starts no timer until asked
// for Done, and ends at its deadline on the manager's clock either way.
func TestBudgetContextEndsAtItsDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, askDone := range []bool{false, true} {
		clk := clock.NewFake(t0)
		m, _ := newManager(leasehook.Sources{Store: NewMemoryStore(), Clock: clk})
		parent := context.WithValue(context.Background(), budgetKey{}, "v")
		b := m.withBudget(parent, t0.Add(time.Minute))
		if b.inner != nil {
			t.Fatal("a budget over a context that never ends started a timer at once")
		}
		if d, ok := b.Deadline(); !ok || !d.Equal(t0.Add(time.Minute)) || b.Value(budgetKey{}) != "v" {
			t.Errorf("Deadline() = %v %v, Value = %v; want the deadline and the parent's values", d, ok, b.Value(budgetKey{}))
		}
		var child context.Context
		if askDone {
			var cancel context.CancelFunc
			child, cancel = context.WithCancel(b) // asks for Done: the timer starts
			defer cancel()
			if b.inner == nil {
				t.Fatal("a derived context did not start the timer")
			}
		}
		if err := b.Err(); err != nil {
			t.Fatalf("Err() before the deadline = %v", err)
		}
		clk.Advance(time.Minute)
		if askDone {
			waitDone(t, "budget", b)
			waitDone(t, "derived context", child)
			// On a fake clock the deadline is a cancellation whose cause
			// is DeadlineExceeded (retry.WithDeadline).
			if !errors.Is(context.Cause(child), context.DeadlineExceeded) {
				t.Errorf("derived context's Cause() = %v, want DeadlineExceeded", context.Cause(child))
			}
		}
		if err := b.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Err() after the deadline = %v, want DeadlineExceeded", err)
		}
		waitDone(t, "budget after its deadline", b)
		b.cancel()
		if err := b.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Err() after the deadline then cancel = %v, want DeadlineExceeded", err)
		}
	}
}

func TestBudgetContextCancel(t *testing.T) {
	m, _ := newManager(leasehook.Sources{Store: NewMemoryStore()})
	b := m.withBudget(context.Background(), time.Now().Add(time.Hour))
	b.cancel()
	if err := b.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() after cancel = %v, want Canceled", err)
	}
	waitDone(t, "cancelled budget", b)
	ran := make(chan struct{})
	context.AfterFunc(b, func() { close(ran) })
	waitDone(t, "AfterFunc of a cancelled budget", ctxOf(ran))

	started := m.withBudget(context.Background(), time.Now().Add(time.Hour))
	child, cancel := context.WithCancel(started)
	defer cancel()
	started.cancel()
	waitDone(t, "child of a cancelled budget", child)
	if !errors.Is(child.Err(), context.Canceled) {
		t.Errorf("child Err() = %v, want Canceled", child.Err())
	}
}

// ctxOf returns a context done when ch is closed.
func ctxOf(ch chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-ch; cancel() }()
	return ctx
}

// A budget over a context that can end follows it; a budget nested in an
// unstarted one with a later deadline needs no timer of that one.
func TestBudgetContextNesting(t *testing.T) {
	m, _ := newManager(leasehook.Sources{Store: NewMemoryStore()})
	parent, cancelParent := context.WithCancel(context.Background())
	b := m.withBudget(parent, time.Now().Add(time.Hour))
	defer b.cancel()
	if b.inner == nil {
		t.Fatal("a budget over a context that can end has no context following it")
	}
	cancelParent()
	waitDone(t, "budget of a cancelled parent", b)
	if !errors.Is(b.Err(), context.Canceled) {
		t.Errorf("Err() = %v, want Canceled", b.Err())
	}

	outer := m.withBudget(context.Background(), time.Now().Add(time.Hour))
	defer outer.cancel()
	inner := m.withBudget(outer, time.Now().Add(time.Minute))
	defer inner.cancel()
	if inner.parent != outer.parent || outer.inner != nil {
		t.Error("a shorter budget nested in an unstarted one did not skip it")
	}
	later := m.withBudget(outer, time.Now().Add(2*time.Hour))
	defer later.cancel()
	if later.parent != outer || outer.inner == nil {
		t.Error("a longer budget nested in one must follow it (and start its timer)")
	}
}
