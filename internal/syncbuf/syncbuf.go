// Package syncbuf holds Buffer, a bytes buffer safe for concurrent writers.
// It imports only the standard library, so that public test helpers
// (internal/daytonafake) and internal/testenv share it without
// either importing the other.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes buffer safe for concurrent writers: a sink for the
// logs and combined output that tests and test servers read back. The zero
// value is ready to use. It does not bound what it holds.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns a copy of everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
