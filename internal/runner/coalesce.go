package runner

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// The WebSocket library masks a client's frames through a 4 KiB
// bufio.Writer and writes each full buffer as it goes: a 256 KiB output
// frame was 64 writes to the controller's socket, each a wakeup of the
// process that reads it (sshd, for a runner behind an SSH ingress), about
// 65 system calls per output chunk on the runner's side alone (issue 55).
// coalescingConn gathers those full-buffer writes of a frame and writes
// them with the frame's last, shorter one: one write per frame.
//
// Every write the library makes is a full buffer (wsWriteBuffer bytes)
// while a frame goes on, and a shorter one at the frame's end, with one
// exception: a frame that ends exactly at a buffer's end. Those bytes
// wait for the next write, at most coalesceDelay after the last one. So no frame waits for
// the next one: a ping, a pong, a close or an ack is written at once
// (each is a frame of its own, shorter than a buffer), and what is held
// never passes coalesceMax.

// wsWriteBuffer is the size of the WebSocket library's write buffer for a
// client connection (github.com/coder/websocket: bufio.NewWriter's
// default).
const wsWriteBuffer = 4096

// coalesceMax is the most bytes coalescingConn holds: a largest output
// frame (256 KiB of data, prpwire.DefaultMaxOutputChunk) and its headers.
const coalesceMax = 256<<10 + 2*wsWriteBuffer

// coalesceDelay bounds how long held bytes wait for the next write: a
// frame that ended exactly at a buffer's end waits that long, and a
// frame whose next buffer comes later than that is written in parts.
const coalesceDelay = 2 * time.Millisecond

type coalescingConn struct {
	net.Conn
	delay time.Duration
	mu    sync.Mutex
	buf   []byte
	timer *time.Timer
	err   error // a failed write of held bytes: every later write fails
}

func newCoalescingConn(c net.Conn, delay time.Duration) *coalescingConn {
	cc := &coalescingConn{Conn: c, delay: delay}
	cc.timer = time.AfterFunc(time.Hour, cc.flushHeld)
	cc.timer.Stop()
	return cc
}

// Write holds p when it is a full buffer and there is room, and writes
// what it holds and p otherwise.
func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if len(p) == wsWriteBuffer && len(c.buf)+len(p) <= coalesceMax {
		c.timer.Reset(c.delay)
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if len(c.buf) == 0 {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if err := c.writeHeldLocked(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flushHeld writes what a frame that ended at a buffer's end left held.
func (c *coalescingConn) flushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && len(c.buf) > 0 {
		_ = c.writeHeldLocked()
	}
}

func (c *coalescingConn) writeHeldLocked() error {
	c.timer.Stop()
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		c.err = err
	}
	return err
}

// Close stops the timer and closes the connection; held bytes are
// dropped, as a closed connection's unsent bytes are.
func (c *coalescingConn) Close() error {
	c.timer.Stop()
	return c.Conn.Close()
}

// coalescingTransport returns a transport for the runner's WebSocket
// connection whose connections coalesce writes (coalescingConn, holding
// bytes at most delay), or rt itself when it is not an *http.Transport
// (nil: http.DefaultTransport's).
func coalescingTransport(rt http.RoundTripper, delay time.Duration) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	t, ok := rt.(*http.Transport)
	if !ok {
		return rt
	}
	t = t.Clone()
	dial := t.DialContext
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newCoalescingConn(c, delay), nil
	}
	return t
}
