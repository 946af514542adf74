package daytona

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/daytonafake"
)

// Issue #13 item 10: terminal output nobody reads is held up to a bound,
// not without limit (the newest is kept), and Wait still returns the exit
// status.
func TestTerminalOutputIsBounded(t *testing.T) {
	t.Parallel()
	srv, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	snap, err := srv.CreateSnapshot("base:1", "debian:12")
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(&Options{PollInterval: time.Millisecond, PollMax: 5 * time.Millisecond})
	cfg, err := d.Schema().Normalize(map[string]any{fieldAPIURL: srv.URL(), fieldAPIKey: srv.APIKey(), fieldSnapshotID: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	ts, err := sb.(*sandbox).OpenTerminal(ctx, drivers.TerminalRequest{Argv: []string{"sh", "-c", "head -c 8388608 /dev/zero | tr '\\0' x; echo; echo LAST; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	res, err := ts.Wait(ctx)
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("Wait = %+v, %v; want exit 3", res, err)
	}
	term := ts.(*terminal)
	term.out.mu.Lock()
	held := string(term.out.buf)
	term.out.mu.Unlock()
	if len(held) > maxTerminalBuffer {
		t.Errorf("%d bytes of unread output held, want at most %d", len(held), maxTerminalBuffer)
	}
	if len(held) < maxTerminalBuffer/2 {
		t.Errorf("only %d bytes of output held: the bound should keep the newest %d", len(held), maxTerminalBuffer)
	}
}
