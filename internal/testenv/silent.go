package testenv

import (
	"net"
	"testing"
)

// SilentListener listens on 127.0.0.1, accepts connections and never
// speaks (a server that hangs after accept), until the test's cleanup; it
// returns the port.
func SilentListener(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}
