package runner

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// countingConn counts the writes that reach the connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// Issue 55: a runner's WebSocket frame reaches its socket in one write,
// not one per 4 KiB of the library's buffer, and every frame arrives
// whole and in order, with a ping in between.
func TestWebSocketFramesAreWrittenWhole(t *testing.T) {
	t.Parallel()
	// Held bytes never time out here: the count does not depend on how
	// fast the library fills its buffers.
	c, got, writes := coalescedPair(t, time.Hour)
	ctx := t.Context()
	msgs := [][]byte{
		bytes.Repeat([]byte{1}, 256<<10), // an output chunk's frame
		bytes.Repeat([]byte{2}, 100),
		bytes.Repeat([]byte{3}, 256<<10),
	}
	for i, m := range msgs {
		before := writes.Load()
		if err := c.Write(ctx, websocket.MessageBinary, m); err != nil {
			t.Fatal(err)
		}
		if n := writes.Load() - before; n != 1 {
			t.Errorf("message %d (%d bytes) took %d writes to the connection, want 1", i, len(m), n)
		}
		if b := <-got; !bytes.Equal(b, m) {
			t.Fatalf("message %d: got %d bytes, want %d of %d", i, len(b), len(m), m[0])
		}
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
}

// A frame that ends exactly at the end of the library's buffer (8184
// bytes of payload and an 8-byte masked header) is written with no frame
// after it.
func TestWebSocketFrameEndingAtABufferEndIsWritten(t *testing.T) {
	t.Parallel()
	c, got, _ := coalescedPair(t, coalesceDelay)
	m := bytes.Repeat([]byte{3}, 8184)
	if err := c.Write(t.Context(), websocket.MessageBinary, m); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, m) {
		t.Fatalf("got %d bytes, want %d", len(b), len(m))
	}
}

// coalescedPair dials a WebSocket server on loopback through
// coalescingTransport (holding bytes at most delay) and returns the client,
// the messages the server reads, and the count of writes that reached the
// client's connection.
func coalescedPair(t *testing.T, delay time.Duration) (*websocket.Conn, <-chan []byte, *atomic.Int64) {
	t.Helper()
	got := make(chan []byte, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			_, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			got <- b
		}
	}))
	t.Cleanup(srv.Close)
	writes := new(atomic.Int64)
	var d net.Dialer
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}}
	ctx := t.Context()
	c, _, err := websocket.Dial(ctx, srv.URL, &websocket.DialOptions{HTTPClient: &http.Client{Transport: coalescingTransport(base, delay)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	go func() {
		for { // the client's reader: pongs
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	}()
	return c, got, writes
}
