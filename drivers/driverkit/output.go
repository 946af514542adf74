package driverkit

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"
)

// OutputBuffer keeps the first limit bytes written to it and notes that more
// were discarded: the Exec output rule of Command.OutputLimit, for drivers to
// share. Writes never fail, so a process is never blocked or killed for
// writing too much. It is safe for concurrent use.
type OutputBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	limit     int
	truncated bool
}

// NewOutputBuffer returns a buffer that keeps at most limit bytes.
func NewOutputBuffer(limit int) *OutputBuffer { return &OutputBuffer{limit: limit} }

// Write keeps what fits under the limit and reports len(p) written.
func (b *OutputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - b.buf.Len()
	if room < len(p) {
		b.truncated = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}

// Bytes returns a copy of what was kept.
func (b *OutputBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// Truncated reports whether anything was discarded.
func (b *OutputBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.truncated
}

// AwaitDone blocks until done is closed or ctx ends. It returns nil when
// done is closed (also when both happened), else ctx.Err(). Drivers use it
// to make Process.Wait and TerminalSession.Wait honour their context.
func AwaitDone(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CopyStdin copies src to dst in one goroutine, for drivers that feed
// Command.Stdin to a process, and closes dst (once) when src ends. The goroutine
// does not outlive the process: when ended is closed (the process ended)
// it stops copying and closes dst, and when src has a SetReadDeadline
// method (an *os.File pipe, a net.Conn) it sets src's read deadline to now
// so that a blocked Read returns at once. (A Read on a reader without
// deadlines cannot be interrupted; the goroutine then ends as soon as that
// Read returns, writing nothing more.) CopyStdin returns a channel that is
// closed when the goroutine has ended.
func CopyStdin(dst io.WriteCloser, src io.Reader, ended <-chan struct{}) <-chan struct{} {
	finished := make(chan struct{})
	copied := make(chan struct{})
	var closeOnce sync.Once
	closeDst := func() { closeOnce.Do(func() { _ = dst.Close() }) }
	go func() {
		defer close(finished)
		defer closeDst()
		buf := make([]byte, 32<<10)
		for {
			n, rerr := src.Read(buf)
			select {
			case <-ended:
				return
			default:
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if rerr != nil {
				return
			}
		}
	}()
	go func() {
		defer close(copied)
		select {
		case <-finished:
		case <-ended:
			if d, ok := src.(interface{ SetReadDeadline(time.Time) error }); ok {
				_ = d.SetReadDeadline(time.Now())
			}
			closeDst()
			<-finished
		}
	}()
	return copied
}
