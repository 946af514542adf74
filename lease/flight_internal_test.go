package lease

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// One key's flight runs once for every caller that comes while it is in
// the air, in do's goroutine or on a runner; the next caller after it
// landed starts a new one.
func TestFlightsCoalesce(t *testing.T) {
	var fs flights
	var runs atomic.Int32
	release := make(chan struct{})
	want := &Handle{}
	fn := func() (*Handle, error) {
		runs.Add(1)
		<-release
		return want, nil
	}
	f := fs.start("k", fn)
	var wg sync.WaitGroup
	got := make([]*Handle, 4)
	for i := range got {
		wg.Go(func() {
			if i%2 == 0 {
				h, err := fs.do("k", fn)
				if err != nil {
					t.Error(err)
				}
				got[i] = h
				return
			}
			j := fs.start("k", fn)
			if j != f {
				t.Error("start of a key in the air made a new flight")
			}
			<-j.done
			got[i] = j.h
		})
	}
	waitFor(t, "the callers to join", func() bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return f.joins == len(got)
	})
	close(release)
	wg.Wait()
	<-f.done
	if n := runs.Load(); n != 1 {
		t.Fatalf("the flight ran %d times, want once", n)
	}
	for i, h := range got {
		if h != want {
			t.Errorf("caller %d got %p, want the flight's handle %p", i, h, want)
		}
	}
	if _, err := fs.do("k", func() (*Handle, error) { runs.Add(1); return nil, errors.New("second") }); err == nil || runs.Load() != 2 {
		t.Errorf("a caller after the landing: err %v, runs %d; want a flight of its own", err, runs.Load())
	}
}

// A runner parks after its flight and takes the next one; flights of
// different keys fly at once; at most maxIdleRunners park; close ends the
// parked ones, and a flight started afterwards still flies.
func TestFlightsRunners(t *testing.T) {
	var fs flights
	first := fs.start("a", func() (*Handle, error) { return nil, nil })
	<-first.done
	waitFor(t, "the first runner to park", func() bool { return fs.parked() == 1 })

	// Two keys at once, the first on the parked runner: each waits for
	// the other to have started, which a single runner could not do.
	aStarted, bStarted := make(chan struct{}), make(chan struct{})
	a := fs.start("a", func() (*Handle, error) {
		close(aStarted)
		<-bStarted
		return nil, nil
	})
	<-aStarted
	if n := fs.parked(); n != 0 {
		t.Errorf("%d runners parked while the only one flies", n)
	}
	b := fs.start("b", func() (*Handle, error) {
		close(bStarted)
		return nil, nil
	})
	<-a.done
	<-b.done
	waitFor(t, "two runners to park", func() bool { return fs.parked() == 2 })

	hold := make(chan struct{})
	var fl []*flight
	for i := range maxIdleRunners + 3 {
		fl = append(fl, fs.start(strings.Repeat("k", i+1), func() (*Handle, error) {
			<-hold
			return nil, nil
		}))
	}
	close(hold)
	for _, f := range fl {
		<-f.done
	}
	waitFor(t, "the runners to park", func() bool { return fs.parked() == maxIdleRunners })
	time.Sleep(10 * time.Millisecond)
	if n := fs.parked(); n != maxIdleRunners {
		t.Errorf("%d runners parked, want at most %d", n, maxIdleRunners)
	}

	fs.close()
	if n := fs.parked(); n != 0 {
		t.Errorf("%d runners parked after close", n)
	}
	after := fs.start("after", func() (*Handle, error) { return nil, errors.New("flew") })
	<-after.done
	if after.err == nil || after.err.Error() != "flew" {
		t.Errorf("a flight after close: %v", after.err)
	}
	time.Sleep(10 * time.Millisecond)
	if n := fs.parked(); n != 0 {
		t.Errorf("a runner parked after close (%d)", n)
	}
}

// A flight whose acquisition panics lands with an error for those who
// joined it, frees its key, and the panic goes on in its goroutine.
func TestFlightsPanic(t *testing.T) {
	var fs flights
	inside, release := make(chan struct{}), make(chan struct{})
	joined := make(chan error, 1)
	var recovered any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recovered = recover() }()
		_, _ = fs.do("k", func() (*Handle, error) {
			close(inside)
			<-release
			panic("driver bug")
		})
	}()
	<-inside
	f := fs.start("k", nil) // in the air: joins, never runs fn
	go func() { <-f.done; joined <- f.err }()
	close(release)
	<-done
	if recovered != "driver bug" {
		t.Errorf("the panic did not go on in the flight's goroutine: recovered %v", recovered)
	}
	if err := <-joined; err == nil || !strings.Contains(err.Error(), "did not return") {
		t.Errorf("a caller that joined the panicking flight: %v", err)
	}
	if h, err := fs.do("k", func() (*Handle, error) { return nil, nil }); h != nil || err != nil {
		t.Errorf("the key after the panic: %v, %v", h, err)
	}
}
