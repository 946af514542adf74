package daytona_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// Issue #13 item 7: terminal input larger than the daemon's 64 KiB
// WebSocket read limit arrives whole (it is split into smaller messages),
// and a window of 1000x1000, the daemon's largest, is kept as asked.
func TestTerminalLargeInputAndFullSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	term, err := drivers.SandboxAs[drivers.Terminal](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := term.OpenTerminal(ctx, drivers.TerminalRequest{Cols: 1000, Rows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	go func() { _, _ = io.Copy(io.Discard, ts) }() // keep the output moving
	const size = 200 << 10
	// Raw mode, no echo: the bytes reach head as they are.
	if _, err := io.WriteString(ts, "stty raw -echo; touch ready; head -c "+fmt.Sprint(size)+" > big; stty size > size; stty sane\n"); err != nil {
		t.Fatal(err)
	}
	// The data goes once the terminal is in raw mode.
	for ctx.Err() == nil {
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "test -e ready"}})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if res.ExitCode == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := ts.Write(bytes.Repeat([]byte("0123456789abcdef"), size/16)); err != nil {
		t.Fatalf("Write of %d bytes: %v", size, err)
	}
	var got string
	for ctx.Err() == nil {
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "wc -c < big; cat size"}})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if got = strings.Join(strings.Fields(string(res.Stdout)), " "); got == fmt.Sprintf("%d 1000 1000", size) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after the write the sandbox reports %q, want %q (the whole input, a 1000x1000 window)", got, fmt.Sprintf("%d 1000 1000", size))
}
