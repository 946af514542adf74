package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writers lose nothing and String reads while they write (run
// with -race).
func TestConcurrentWritesAreKept(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("ab"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 800) {
		t.Errorf("len %d, want %d bytes of \"ab\" pairs", len(got), 1600)
	}
}
