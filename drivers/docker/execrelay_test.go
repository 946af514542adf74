package docker_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/execrelay"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease/leasetest"
)

// Issue 57 item 3: a runner ingress carried by one streaming exec
// (internal/execrelay) works across the Docker driver's real exec stream:
// in a container with no network, the real runner dials the relay's socket
// (in the container's own filesystem, not a host mount), reaches a real
// controller on the host and runs a task; the relay killed in the
// container is started again, and the runner comes back through the new
// one and runs another task.
func TestRunnerReachesTheHostThroughAnExecRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	spec := runnerSpec(t)
	sb := e.acquire(ctx, e.config(e.img.Ref, map[string]any{"network": "none"}), drivers.AcquireRequest{LeaseID: "lease-1", Runner: &spec})
	const sock = "/tmp/berth-relay/prp.sock"
	in, err := execrelay.OpenIngress(ctx, sb, execrelay.IngressConfig{Binary: docker.RunnerBinaryPath, Socket: sock,
		StateDir: docker.RunnerStateDir, Options: &execrelay.Options{MinBackoff: 50 * time.Millisecond, Drain: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if got := in.Endpoint(); got != "unix:"+sock {
		t.Errorf("Endpoint = %q", got)
	}
	h := newPRPHost(t, sb, spec)
	srv := &http.Server{Handler: h.c}
	go func() { _ = srv.Serve(in) }()
	defer srv.Close()

	leasetest.RecordActive(t, h.leases, "lease-1", "co-1")
	tk, _, err := h.c.MintTicket(ctx, operator, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: "lease-1", Ticket: tk.String()}); err != nil {
		t.Fatal(err)
	}
	session := h.session(ctx, sb)
	task := func(id, word string) {
		t.Helper()
		att, err := h.c.Reattach(ctx, operator, session)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := att.Start(ctx, operator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: id, Argv: []string{"echo", word}}})
		if err != nil {
			t.Fatal(err)
		}
		if exit, err := tk.Wait(ctx); err != nil || exit.Code != 0 {
			t.Fatalf("task %s: %+v, %v", id, exit, err)
		}
		if got, err := h.c.Output(ctx, operator, session, id, prp.Stdout); err != nil || string(got) != word+"\n" {
			t.Errorf("task %s's stdout = %q, %v; want %q", id, got, err, word+"\n")
		}
	}
	task("t1", "through-the-relay")

	// Kill the relay in the container (its exec ends); the listener starts
	// another, which binds the socket again.
	pids := strings.Fields(run(t, ctx, sb, "sh", "-c", relayPIDs))
	if len(pids) != 1 {
		t.Fatalf("found relays %q in the container, want one", pids)
	}
	run(t, ctx, sb, "kill", "-9", pids[0])
	for {
		again := strings.Fields(run(t, ctx, sb, "sh", "-c", relayPIDs))
		if len(again) == 1 && again[0] != pids[0] {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no new relay in the container: %q", again)
		}
		time.Sleep(50 * time.Millisecond)
	}
	task("t2", "after-a-restart")

	// The server's Close closes the ingress, which stops accepting; the
	// runner's connection (a WebSocket the controller hijacked, which the
	// server does not close) keeps the relay for the drain (500 ms here),
	// after which the relay is ended through its stdin (the exec's stdin
	// closed), exits on its own, well within the grace before its exec is
	// ended, and removes its socket.
	began := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		left := strings.Fields(run(t, ctx, sb, "sh", "-c", relayPIDs))
		if len(left) == 0 {
			break
		}
		if time.Since(began) > 5*time.Second {
			t.Fatalf("relays %q left in the container %v after the ingress and its connections closed", left, time.Since(began).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
	run(t, ctx, sb, "sh", "-c", "test ! -e "+sock)
	if _, err := in.LogTail(ctx, 4096); err != nil {
		t.Errorf("LogTail after Close: %v", err)
	}
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: "lease-1", Ticket: "unused"}); err == nil {
		t.Error("Launch after Close succeeded")
	}

	// A runner binary that is not there: OpenIngress says so, as
	// unavailable, with what the exec said.
	_, err = execrelay.OpenIngress(ctx, sb, execrelay.IngressConfig{Binary: "/nonexistent/berth-runner", Socket: sock,
		StateDir: docker.RunnerStateDir, Options: &execrelay.Options{GreetingTimeout: time.Second}})
	if !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/berth-runner") {
		t.Errorf("OpenIngress with a missing binary: %v; want ErrUnavailable naming it", err)
	}
	t.Logf("OpenIngress with a missing binary: %v", err)
}

// relayPIDs prints the pids of the relays in the container (not its own,
// whose command line holds the pattern).
const relayPIDs = `for d in /proc/[0-9]*; do
	[ "${d#/proc/}" = "$$" ] && continue
	case "$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" in *" relay --socket "*) echo "${d#/proc/}";; esac
done`
