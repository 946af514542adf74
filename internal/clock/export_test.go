package clock

import "time"

// Waiters, AfterAt and Set give this package's external tests the Fake's
// unexported helpers.

func (f *Fake) Waiters() int { return f.pending() }

func (f *Fake) AfterAt(deadline time.Time) <-chan time.Time { return f.afterAt(deadline) }

func (f *Fake) Set(t time.Time) { f.set(t) }
