package controller

import (
	"testing"
	"time"
)

// The writer acks stored output in batches (issue 55): an eighth of the
// runner's window at once, anything else within ackDelay of the writer
// seeing it stored, never later.
func TestAckPolicy(t *testing.T) {
	const window = 16 << 20
	for _, c := range []struct {
		bytes int64
		age   time.Duration
		want  time.Duration
	}{
		{0, 0, ackDelay},                         // a result or an exit: within ackDelay
		{window/8 - 1, 0, ackDelay},              // less than an eighth of the window
		{window / 8, 0, 0},                       // an eighth: now
		{window, 0, 0},                           // more
		{1, ackDelay / 4, ackDelay - ackDelay/4}, // what is left of the delay
		{1, ackDelay, 0},                         // the delay is up
		{1, ackDelay + time.Second, 0},           // long past it
		{window/8 - 1, ackDelay - time.Nanosecond, time.Nanosecond},
	} {
		if got := ackPolicy(c.bytes, c.age, window); got != c.want {
			t.Errorf("ackPolicy(%d, %v, %d) = %v, want %v", c.bytes, c.age, window, got, c.want)
		}
		if got := ackPolicy(c.bytes, c.age, window); got < 0 || got > ackDelay {
			t.Errorf("ackPolicy(%d, %v) = %v: outside [0, ackDelay]", c.bytes, c.age, got)
		}
	}
}
