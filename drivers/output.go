package drivers

import (
	"bytes"
	"sync"
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
