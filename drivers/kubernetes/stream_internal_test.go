package kubernetes

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/berthdev/berth/drivers"
)

// An exec stream that ends without its status is transient (a read of the
// pod's files is tried again); an exit status, a refusal or a cancellation
// is not.
func TestBrokenStreamIsTransient(t *testing.T) {
	c := &cluster{server: "https://127.0.0.1:6443"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("write: %w", syscall.ECONNRESET), true},
		{errors.New("error reading from error stream: read message: websocket: close 1006 (abnormal closure): unexpected EOF"), true},
		{errors.New("command terminated with exit code 2"), false},
		{io.EOF, false},
	} {
		got := errors.Is(c.apiErr("pod ns/p", "exec", tc.err), drivers.ErrTransient)
		if got != tc.want {
			t.Errorf("apiErr(%v) transient = %t, want %t", tc.err, got, tc.want)
		}
	}
}
