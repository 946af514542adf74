package kubernetes

import (
	"bytes"
	"io"
	"sync"
)

// The end of a command's output, proven. The API server's exec can lose
// the tail of a command's output when the command exits (see Files): the
// status arrives, the last bytes do not. So a command without stdin of
// its own runs under a wrapper that stays: once the command has exited,
// the wrapper writes an end mark (endMark, with a nonce of the exec) to
// its stdout and to its stderr, then waits for the end of its stdin, which
// the host closes only once both marks have arrived here; only then does
// the wrapper exit with the command's status. What came before a mark is
// then all the command wrote to that stream (but for a process it left
// running, whose later bytes pass through after the mark). A stream that
// ends without its mark and without a kill is reported, never taken as
// whole.
//
// The mark proves the transport, not the task: the task can read the
// nonce from the wrapper's argv and write it early, which cuts short only
// the proof of its own output.

// endMark returns the mark of an exec with the given nonce. It starts with
// a NUL byte, which text output never holds: a chunk that ends with a
// prefix of the mark is held back until the next one (endWriter), and the
// NUL keeps that to binary output.
func endMark(nonce string) []byte { return []byte("\x00berth-exec-end-" + nonce + "\x00") }

// endWriter passes what it is written to w, but for the first end mark,
// which it swallows and records. Bytes that might begin the mark are held
// back until the next write shows they do not, or until flush.
type endWriter struct {
	mu     sync.Mutex
	w      io.Writer
	mark   []byte
	held   []byte // a proper prefix of mark, not yet passed on
	seen   bool
	onMark func() // called once, outside mu, when the mark has arrived
}

func newEndWriter(w io.Writer, mark []byte, onMark func()) *endWriter {
	return &endWriter{w: w, mark: mark, onMark: onMark}
}

// Write passes b on, less the mark. It reports len(b) written when w took
// everything it was given, as an io.Writer must. client-go writes each
// stream from one goroutine, so the order of the bytes is kept.
func (e *endWriter) Write(b []byte) (int, error) {
	e.mu.Lock()
	found := false
	var err error
	switch {
	case e.seen:
		_, err = e.w.Write(b)
	default:
		buf := b
		if len(e.held) > 0 {
			buf = append(e.held, b...)
		}
		e.held = nil
		if i := bytes.Index(buf, e.mark); i >= 0 {
			found, e.seen = true, true
			err = writeAll(e.w, buf[:i], buf[i+len(e.mark):])
		} else {
			keep := partialSuffix(buf, e.mark)
			if keep > 0 {
				e.held = append([]byte(nil), buf[len(buf)-keep:]...)
			}
			err = writeAll(e.w, buf[:len(buf)-keep])
		}
	}
	e.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if found && e.onMark != nil {
		e.onMark()
	}
	return len(b), nil
}

// writeAll writes each non-empty piece to w.
func writeAll(w io.Writer, pieces ...[]byte) error {
	for _, p := range pieces {
		if len(p) > 0 {
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush passes on what is held back: the stream has ended, so it was no
// mark.
func (e *endWriter) flush() {
	e.mu.Lock()
	held := e.held
	e.held = nil
	e.mu.Unlock()
	if len(held) > 0 {
		_, _ = e.w.Write(held)
	}
}

// marked reports whether the mark has arrived.
func (e *endWriter) marked() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen
}

// partialSuffix returns the length of the longest suffix of b that is a
// proper prefix of mark.
func partialSuffix(b, mark []byte) int {
	for n := min(len(b), len(mark)-1); n > 0; n-- {
		if bytes.HasPrefix(mark, b[len(b)-n:]) {
			return n
		}
	}
	return 0
}
