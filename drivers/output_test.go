package drivers_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth/drivers"
)

func TestOutputBuffer(t *testing.T) {
	t.Parallel()
	b := drivers.NewOutputBuffer(5)
	if n, err := b.Write([]byte("abc")); n != 3 || err != nil || b.Truncated() {
		t.Fatalf("first write: %d %v truncated=%v", n, err, b.Truncated())
	}
	if n, err := b.Write([]byte("defgh")); n != 5 || err != nil {
		t.Fatalf("over-limit write must report all written: %d %v", n, err)
	}
	if got := string(b.Bytes()); got != "abcde" || !b.Truncated() {
		t.Errorf("kept %q truncated=%v, want %q true", got, b.Truncated(), "abcde")
	}

	// Concurrent writers keep exactly limit bytes under -race.
	c := drivers.NewOutputBuffer(100)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { c.Write([]byte(strings.Repeat("x", 10))) })
	}
	wg.Wait()
	if len(c.Bytes()) != 100 || !c.Truncated() {
		t.Errorf("concurrent: kept %d truncated=%v", len(c.Bytes()), c.Truncated())
	}
}
