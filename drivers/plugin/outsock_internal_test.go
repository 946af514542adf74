package plugin

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// The host's end of an output socket takes a socket's descriptor sent
// with its id (before or after the claim), drops a packet that is not an
// id with one descriptor of a socket, and once the plugin's end closes
// fails the claims and closes what was not claimed.
func TestOutSocket(t *testing.T) {
	o, child, err := newOutSocket()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.FileConn(child)
	_ = child.Close()
	if err != nil {
		t.Fatal(err)
	}
	plug := c.(*net.UnixConn)
	sendFile := func(id uint64, payload []byte, files ...*os.File) {
		t.Helper()
		var fds []int
		for _, f := range files {
			fds = append(fds, int(f.Fd()))
		}
		b := payload
		if b == nil {
			b = binary.BigEndian.AppendUint64(nil, id)
		}
		var oob []byte
		if len(fds) > 0 {
			oob = syscall.UnixRights(fds...)
		}
		if _, _, err := plug.WriteMsgUnix(b, oob, nil); err != nil {
			t.Fatal(err)
		}
	}
	// conn returns the read end of a connection that carries text.
	conn := func(text string) *os.File {
		t.Helper()
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := os.NewFile(uintptr(fds[1]), "w")
		_, _ = w.WriteString(text)
		_ = w.Close()
		r := os.NewFile(uintptr(fds[0]), "r")
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	pipe := func() *os.File {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	read := func(id uint64, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		f, err := o.claim(ctx, id)
		if err != nil {
			t.Fatalf("claim %d: %v", id, err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil || string(b) != want {
			t.Fatalf("claim %d read %q, %v; want %q", id, b, err, want)
		}
	}

	sendFile(1, nil, conn("one"))
	read(1, "one") // sent before the claim
	go func() { time.Sleep(50 * time.Millisecond); sendFile(2, nil, conn("two")) }()
	read(2, "two")                            // claimed before it came
	sendFile(3, []byte("short"), conn("bad")) // not an id
	sendFile(4, nil, conn("x"), conn("y"))    // two descriptors
	sendFile(5, nil)                          // none
	sendFile(6, nil, conn("six"))             // never claimed
	sendFile(9, nil, pipe())                  // not a socket
	sendFile(7, nil, conn("seven"))
	read(7, "seven") // the bad packets were dropped in between
	o.mu.Lock()
	_, kept := o.files[9]
	o.mu.Unlock()
	if kept {
		t.Errorf("a pipe was kept as an output connection")
	}
	_ = plug.Close()
	if _, err := o.claim(t.Context(), 8); !errors.Is(err, errOutSocketClosed) {
		t.Errorf("claim after the plugin's end closed: %v, want errOutSocketClosed", err)
	}
	o.mu.Lock()
	left := len(o.files)
	o.mu.Unlock()
	if left != 0 {
		t.Errorf("%d descriptors kept after the plugin's end closed", left)
	}
}
