package ssh

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/internal/proctest"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
)

// newDropbearEnv is newEnv against a real Dropbear server
// (testenv.Dropbear): sessions share the server's process group and only
// TCP is forwarded.
func newDropbearEnv(t testing.TB) *env {
	t.Helper()
	return envOn(testenv.Dropbear(t))
}

// dropbearSessions is max_sessions against Dropbear. Dropbear 2022.83
// (Debian bookworm's) has a known bug, mkj/dropbear#321 (fixed upstream by
// pull request #326, "Don't close channels when a PID hasn't started"):
// when one of the connection's children exits while a new session channel
// waits for its exec, it closes that channel at once, yet still runs the
// exec it receives (no reply goes out), and output from it then trips an
// assertion that ends the whole connection. Measured on one connection
// with a plain x/crypto client, four at once: 1 in 10 starts failed with
// EOF, and 1 of 3 such commands ran all the same; the conformance suite at
// the default max_sessions failed 6 of 10 runs. The driver sends control
// commands to a Dropbear server over a connection of their own
// (controlSession) and starts an unanswered command again only once it
// holds the start's claim (startCommand), so it never runs twice; at
// max_sessions 2, so that each connection carries one session at a time,
// as an operator would set it for such a server (drivers/ssh/doc.go), the
// suite passed 12 of 12 runs (the default: 0 of 6, in the parallel
// subtest).
var dropbearSessions = 2

func newDropbearHarness(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
	return harnessOn(tb, newDropbearEnv(tb), func(m map[string]any) { m[fieldMaxSessions] = dropbearSessions })
}

// Issue 23: the driver passes the conformance suite against Dropbear as it
// does against OpenSSH, including a cancelled process tree, a release with
// a running tree (no survivor; a confirmed receipt only when nothing
// survives) and the runner through the TCP remote forward.
func TestConformanceDropbear(t *testing.T) {
	drivertest.RunConformanceTests(t, newDropbearHarness)
}

// treeCommand is a process tree: a shell with a background sleep and a
// foreground one, both with the argument marker.
func treeCommand(marker string) drivers.Command {
	return drivers.Command{Argv: []string{"sh", "-c", "sleep " + marker + " & sleep " + marker + "; wait"}}
}

// waitStarted waits until n processes with marker run.
func waitStarted(t *testing.T, marker string, n int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if len(proctest.LivePIDs("\x00"+marker+"\x00")) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the tree with %s did not start", marker)
}

// Issue 23 item 1: Dropbear starts sessions in its own process group, not a
// new one. A cancelled process tree leaves no process behind, and Release
// with a running tree ends all of it, confirming the receipt only once
// nothing of the lease survives: the wrapper makes the group itself.
func TestDropbearCancelAndReleaseLeaveNoSurvivor(t *testing.T) {
	e := newDropbearEnv(t)
	sb := e.acquire(t, e.config(t, nil))

	marker := strconv.Itoa(900000 + os.Getpid()%10000)
	ctx, cancel := context.WithCancel(testCtx(t))
	p, err := sb.Start(ctx, treeCommand(marker), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, marker, 2)
	cancel()
	if _, err := p.Wait(context.Background()); err == nil {
		t.Error("Wait after cancellation returned no error")
	}
	if left := proctest.LivePIDs("\x00" + marker + "\x00"); len(left) > 0 {
		t.Errorf("cancelled tree: processes %v still run", left)
	}

	marker2 := strconv.Itoa(910000 + os.Getpid()%10000)
	if _, err := sb.Start(testCtx(t), treeCommand(marker2), nil, nil); err != nil {
		t.Fatal(err)
	}
	waitStarted(t, marker2, 2)
	r, err := sb.Release(testCtx(t), drivers.Destroy)
	left := proctest.LivePIDs("\x00" + marker2 + "\x00")
	if len(left) > 0 {
		t.Errorf("release: processes %v still run (receipt confirmed %v: %s)", left, r.Confirmed, r.Evidence)
	}
	if err != nil || !r.Confirmed {
		t.Errorf("release = %+v, %v; want a confirmed receipt once nothing survives", r, err)
	}
	for _, pid := range append(proctest.LivePIDs("\x00"+marker+"\x00"), left...) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Issue 23 item 2: Dropbear refuses unix-socket forwarding; the ingress is
// a TCP forward on the server's loopback instead (a port the server
// picked), opened before the runner is uploaded, and a connection made to
// it on the server arrives at Accept.
func TestDropbearRunnerIngressFallsBackToLoopbackTCP(t *testing.T) {
	e := newDropbearEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	bin, sum := testenv.RunnerBinarySum(t)
	ctx := testCtx(t)
	ri, err := sb.HostRunner(ctx, drivers.RunnerSpec{Binary: bin, SHA256: sum})
	if err != nil {
		t.Fatalf("HostRunner: %v", err)
	}
	ep := ri.Endpoint()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(ep, "http://"))
	if !strings.HasPrefix(ep, "http://") || err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Endpoint = %q, want http://127.0.0.1:PORT (a port the server picked)", ep)
	}
	go func() {
		c, err := ri.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hello over the forward\n"))
			c.Close()
		}
	}()
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"busybox", "nc", "127.0.0.1", port}})
	if err != nil || !strings.Contains(string(res.Stdout), "hello over the forward") {
		t.Errorf("reading the forward on the server = %+v, %v", res, err)
	}
	if err := ri.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// Issue 23 item 2: a server that forwards nothing (Dropbear -k) makes
// HostRunner fail with ErrUnsupported naming both refused requests, and
// nothing was uploaded.
func TestRunnerOnAServerThatForwardsNothingIsUnsupported(t *testing.T) {
	srv := testenv.Dropbear(t, "-k")
	e := &env{srv: srv, d: newDriver(nil), log: &syncBuffer{}}
	sb := e.acquire(t, e.config(t, nil))
	bin, sum := testenv.RunnerBinarySum(t)
	_, err := sb.HostRunner(testCtx(t), drivers.RunnerSpec{Binary: bin, SHA256: sum})
	if !errors.Is(err, drivers.ErrUnsupported) || reason.Of(err) != reason.Unsupported ||
		!strings.Contains(err.Error(), "streamlocal-forward@openssh.com") || !strings.Contains(err.Error(), "tcpip-forward") ||
		strings.Contains(err.Error(), "AllowStreamLocalForwarding") {
		t.Errorf("HostRunner = %v, want ErrUnsupported (code unsupported) naming both refused forwards and no OpenSSH setting", err)
	}
	if n := e.d.uploads.Load(); n != 0 {
		t.Errorf("%d uploads before the forward was refused, want none", n)
	}
	if _, err := os.Stat(filepath.Join(srv.Home(), ".cache", "berth", "runner", sum)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runner binary is on the server: %v", err)
	}
}

// CAP-2 (issue 23): forwarding "none" narrows runner_ingress away; "unix",
// "tcp" and absent do not; another value is refused naming the field.
func TestForwardingNarrowsRunnerIngress(t *testing.T) {
	d := newDriver(nil)
	base := map[string]any{fieldHost: "h", fieldUser: "u", fieldPrivateKey: pemOf(t), fieldKnownHosts: []any{}}
	for f, want := range map[string]bool{"": true, forwardingUnix: true, forwardingTCP: true, forwardingNone: false} {
		raw := maps.Clone(base)
		if f != "" {
			raw[fieldForwarding] = f
		}
		cfg, err := d.Schema().Normalize(raw)
		if err != nil {
			t.Fatalf("forwarding %q: %v", f, err)
		}
		if got := drivers.Effective(d, drivers.ConfigNarrowing(d, cfg)).Has(drivers.CapRunnerIngress); got != want {
			t.Errorf("forwarding %q: runner_ingress %v, want %v", f, got, want)
		}
	}
	raw := maps.Clone(base)
	raw[fieldForwarding] = "udp"
	if _, err := d.Schema().Normalize(raw); err == nil || !strings.Contains(err.Error(), fieldForwarding) {
		t.Errorf("forwarding udp: %v, want an error naming %s", err, fieldForwarding)
	}
}

func pemOf(t testing.TB) string {
	p, _ := genPEM(t, "")
	return p
}
