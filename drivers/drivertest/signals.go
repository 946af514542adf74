package drivertest

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// testStreamSignals: every driver accepts the one signal set of
// driverkit.Signals, and each signal of it, sent to the process group, ends
// a command that has no handler for it; a name outside the set is
// drivers.ErrUnsupported. The script ends with "exit $?" so that sh waits
// for sleep instead of exec'ing it: busybox sh ignores SIGQUIT itself and
// an exec'd command would inherit that (a shell that does not ignore the
// signal dies of it too).
func testStreamSignals(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, sig := range driverkit.Signals() {
		wg.Go(func() {
			out := newWatcher()
			p, err := se.Start(ctx, sh(scriptReadyStatus), out, nil)
			if err != nil {
				t.Errorf("Start for %s: %v", sig, err)
				return
			}
			if !out.waitUntil(ctx, "ready") {
				t.Errorf("%s: the command did not print ready; output %q", sig, out.String())
				_ = p.Signal(ctx, "KILL")
				return
			}
			if err := p.Signal(ctx, sig); err != nil {
				t.Errorf("Signal(%s): %v", sig, err)
				_ = p.Signal(ctx, "KILL")
				return
			}
			wctx, cancel := context.WithTimeout(ctx, promptBound)
			defer cancel()
			// A signal that reaches the group while sh is between fork and
			// exec of sleep is taken by the child's copy of sh's handler and
			// lost at the exec, and sh then waits for sleep (dash does):
			// send it again until the command ends, so the test checks that
			// the signal ends the command, not the shell's fork window.
			resend := time.NewTicker(100 * time.Millisecond)
			defer resend.Stop()
			waited := make(chan struct{})
			defer close(waited)
			go func() {
				for {
					select {
					case <-waited:
						return
					case <-resend.C:
						_ = p.Signal(ctx, sig)
					}
				}
			}()
			res, err := p.Wait(wctx)
			switch {
			case err != nil:
				t.Errorf("Wait after Signal(%s): %v%s", sig, err, ignoredHere(sig))
				_ = p.Signal(ctx, "KILL")
			case res.ExitCode == 0:
				t.Errorf("a process signalled with %s exited 0", sig)
			case res.Signal != "" && res.Signal != sig:
				t.Errorf("a process signalled with %s reports signal %s", sig, res.Signal)
			}
		})
	}
	wg.Wait()

	p, err := se.Start(ctx, sh("sleep 300"), nil, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() { _ = p.Signal(ctx, "KILL") }()
	if err := p.Signal(ctx, "BERTH-NO-SUCH-SIGNAL"); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("Signal of an unknown name: err = %v, want ErrUnsupported", err)
	}
}

// ignoredHere returns a hint when this test process ignores the signal
// sig: a process it starts (a local command, a test's own SSH server)
// inherits an ignored disposition, and a shell in it cannot undo it, so
// the signal cannot end the command. Go keeps SIGHUP and SIGINT ignored
// when a program starts with them ignored: under nohup, or as a
// background job of a shell without job control.
func ignoredHere(sig string) string {
	n, ok := map[string]syscall.Signal{"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT,
		"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM}[sig]
	if !ok || !signal.Ignored(n) {
		return ""
	}
	return fmt.Sprintf(" (this test process ignores SIG%s, and the processes it starts inherit that: run the suite without nohup, or from a shell with job control)", sig)
}
