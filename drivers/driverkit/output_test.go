package driverkit_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth/drivers/driverkit"
)

func TestOutputBuffer(t *testing.T) {
	t.Parallel()
	b := driverkit.NewOutputBuffer(5)
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
	c := driverkit.NewOutputBuffer(100)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { c.Write([]byte(strings.Repeat("x", 10))) })
	}
	wg.Wait()
	if len(c.Bytes()) != 100 || !c.Truncated() {
		t.Errorf("concurrent: kept %d truncated=%v", len(c.Bytes()), c.Truncated())
	}
}

// closeCounter is a buffer that counts its Close calls.
type closeCounter struct {
	bytes.Buffer
	mu     sync.Mutex
	closes int
}

func (c *closeCounter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Buffer.Write(b)
}

func (c *closeCounter) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	return nil
}

// CopyStdin copies all of a finite stdin and closes the destination once.
func TestCopyStdinCopiesAndClosesOnce(t *testing.T) {
	t.Parallel()
	dst := &closeCounter{}
	ended := make(chan struct{})
	<-driverkit.CopyStdin(dst, strings.NewReader("hello stdin"), ended)
	close(ended)
	dst.mu.Lock()
	defer dst.mu.Unlock()
	if got := dst.String(); got != "hello stdin" || dst.closes != 1 {
		t.Errorf("copied %q with %d closes, want %q and 1", got, dst.closes, "hello stdin")
	}
}

// When the process ends first, the copy stops: a Read blocked on a pipe
// with deadlines returns, and the goroutine ends without the writer ever
// writing or closing the pipe.
func TestCopyStdinEndsWithTheProcess(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	dst := &closeCounter{}
	ended := make(chan struct{})
	finished := driverkit.CopyStdin(dst, r, ended)
	close(ended) // the process ended; nobody ever writes to w
	<-finished
	dst.mu.Lock()
	defer dst.mu.Unlock()
	if dst.Len() != 0 || dst.closes != 1 {
		t.Errorf("after the process ended: copied %d bytes, %d closes; want 0 and 1", dst.Len(), dst.closes)
	}
}

// AwaitDone prefers done over an ended context and returns ctx's error
// otherwise.
func TestAwaitDone(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	if err := driverkit.AwaitDone(cancelled, done); !errors.Is(err, context.Canceled) {
		t.Errorf("AwaitDone(cancelled, open) = %v, want context.Canceled", err)
	}
	close(done)
	if err := driverkit.AwaitDone(cancelled, done); err != nil {
		t.Errorf("AwaitDone(cancelled, closed) = %v, want nil", err)
	}
}
