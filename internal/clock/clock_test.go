package clock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/clock"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fired(ch <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-ch:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestFakeFiresOnlyWhenAdvancedPastTheDeadline(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(epoch)
	ch := f.After(time.Minute)
	if _, ok := fired(ch); ok {
		t.Fatal("timer fired before the clock moved")
	}
	f.Advance(59 * time.Second)
	if _, ok := fired(ch); ok {
		t.Fatal("timer fired a second early")
	}
	f.Advance(time.Second)
	got, ok := fired(ch)
	if !ok || !got.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("after a minute: fired %t at %v, want %v", ok, got, epoch.Add(time.Minute))
	}
	if n := f.Waiters(); n != 0 {
		t.Errorf("Waiters = %d after firing, want 0", n)
	}
}

func TestFakeNonPositiveDurationsAndPastDeadlinesFireAtOnce(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(epoch)
	for name, ch := range map[string]<-chan time.Time{
		"After(0)":      f.After(0),
		"After(-1s)":    f.After(-time.Second),
		"AfterAt(now)":  f.AfterAt(epoch),
		"AfterAt(past)": f.AfterAt(epoch.Add(-time.Hour)),
	} {
		if got, ok := fired(ch); !ok || !got.Equal(epoch) {
			t.Errorf("%s: fired %t at %v, want at once at %v", name, ok, got, epoch)
		}
	}
}

func TestFakeAfterAtAndSetNeverRunBackwards(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(epoch)
	ch := f.AfterAt(epoch.Add(time.Hour))
	f.Set(epoch.Add(-time.Hour))
	f.Advance(-time.Hour)
	if !f.Now().Equal(epoch) {
		t.Fatalf("Now = %v after moving backwards, want %v", f.Now(), epoch)
	}
	f.Set(epoch.Add(2 * time.Hour))
	if got, ok := fired(ch); !ok || !got.Equal(epoch.Add(2*time.Hour)) {
		t.Errorf("AfterAt: fired %t at %v, want at %v", ok, got, epoch.Add(2*time.Hour))
	}
}

func TestWaitForWaitersSeesATimerStartedConcurrently(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(epoch)
	done := make(chan time.Time)
	go func() { done <- <-f.After(time.Second) }()
	if !f.WaitForWaiters(1, nil) {
		t.Fatal("WaitForWaiters returned false without a done channel")
	}
	f.Advance(time.Second)
	if got := <-done; !got.Equal(epoch.Add(time.Second)) {
		t.Errorf("fired at %v, want %v", got, epoch.Add(time.Second))
	}
	stop := make(chan struct{})
	close(stop)
	if f.WaitForWaiters(1, stop) {
		t.Error("WaitForWaiters with no timer and a closed done returned true")
	}
}

// A Fake drives code that waits on a Clock: advance it once the code waits.
func ExampleFake() {
	f := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var c clock.Clock = f
	done := make(chan string)
	go func() {
		<-c.After(5 * time.Minute) // e.g. a slow start of the fake driver
		done <- "started at " + c.Now().Format(time.TimeOnly)
	}()
	f.WaitForWaiters(1, nil)
	f.Advance(5 * time.Minute)
	fmt.Println(<-done)
	// Output: started at 00:05:00
}

// At waits for an absolute deadline: on a Fake it fires when the time
// reaches the deadline even if the time moved between reading Now and
// asking for the timer; on another Clock it falls back to After.
func TestAt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := clock.NewFake(t0)
	deadline := t0.Add(10 * time.Second)
	f.Advance(4 * time.Second) // the caller read Now() before this move
	ch := clock.At(f, deadline)
	f.Advance(6 * time.Second)
	select {
	case got := <-ch:
		if !got.Equal(deadline) {
			t.Errorf("At fired at %s, want %s", got, deadline)
		}
	default:
		t.Fatal("At did not fire when the fake time reached the deadline")
	}
	if got := <-clock.At(clock.Real{}, time.Now().Add(-time.Second)); got.IsZero() {
		t.Error("At on the wall clock with a past deadline did not fire")
	}
}
