package kubernetes

import (
	"bytes"
	"strings"
	"testing"
)

// The end mark is swallowed wherever the stream's writes split it, what
// comes before and after it passes whole and in order, and the mark is
// reported once.
func TestEndWriterSwallowsTheMarkAcrossAnySplit(t *testing.T) {
	mark := endMark("0123456789abcdef")
	before, after := []byte("output\x00ber\x00"), []byte("late bytes of a process left running")
	stream := bytes.Join([][]byte{before, mark, after, mark}, nil) // a second mark is the task's, passed on
	want := bytes.Join([][]byte{before, after, mark}, nil)
	for split := 0; split <= len(stream); split++ {
		for _, step := range []int{1, 3, len(stream)} {
			var out bytes.Buffer
			calls := 0
			e := newEndWriter(&out, mark, func() { calls++ })
			write := func(b []byte) {
				for len(b) > 0 {
					k := min(step, len(b))
					if n, err := e.Write(b[:k]); n != k || err != nil {
						t.Fatalf("Write = %d, %v; want %d, nil", n, err, k)
					}
					b = b[k:]
				}
			}
			write(stream[:split])
			write(stream[split:])
			e.flush()
			if !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("split %d step %d: passed %q, want %q", split, step, out.Bytes(), want)
			}
			if calls != 1 || !e.marked() {
				t.Fatalf("split %d step %d: onMark called %d times, marked %v; want once, true", split, step, calls, e.marked())
			}
		}
	}
}

// Without the mark nothing is lost: text passes at once, a tail that could
// begin the mark waits for the next write or the end of the stream.
func TestEndWriterWithoutTheMarkLosesNothing(t *testing.T) {
	mark := endMark("0123456789abcdef")
	var out bytes.Buffer
	e := newEndWriter(&out, mark, func() { t.Error("onMark called without the mark") })
	e.Write([]byte("hello\n"))
	if out.String() != "hello\n" {
		t.Fatalf("text was held back: passed %q", out.String())
	}
	e.Write([]byte("bin\x00berth-exec"))
	if out.String() != "hello\nbin" {
		t.Fatalf("after a write ending with the mark's start, passed %q; want %q", out.String(), "hello\nbin")
	}
	e.Write([]byte("-other"))
	if want := "hello\nbin\x00berth-exec-other"; out.String() != want {
		t.Fatalf("passed %q, want %q", out.String(), want)
	}
	e.Write([]byte(strings.Repeat("z", 10) + "\x00"))
	e.flush()
	if want := "hello\nbin\x00berth-exec-other" + strings.Repeat("z", 10) + "\x00"; out.String() != want || e.marked() {
		t.Fatalf("after flush: passed %q, marked %v; want %q, false", out.String(), e.marked(), want)
	}
}
