package drivertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
)

func testResumeUnknown(t *testing.T, ctx context.Context, h Harness) {
	r, err := drivers.DriverAs[drivers.Resumer](h.Driver())
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Resume(ctx, h.Config(), "berth-conformance-no-such-sandbox-"+uniqueSuffix())
	if !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Resume of an unknown id: err = %v, want ErrNotFound", err)
	}
}

// LEASE-6: a stopped sandbox is resumable and runs commands again.
func testStopResume(t *testing.T, ctx context.Context, h Harness) {
	r, err := drivers.DriverAs[drivers.Resumer](h.Driver())
	if err != nil {
		t.Fatal(err)
	}
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	execOK(t, ctx, sb, drivers.Command{Argv: []string{"echo", "before"}})
	rc, err := sb.Release(ctx, drivers.Stop)
	if err != nil {
		t.Fatalf("Release(stop): %v", err)
	}
	if !rc.Proves(sb.ID(), drivers.Stop) {
		t.Errorf("stop receipt %+v does not prove stop of %q", rc, sb.ID())
	}
	again, err := r.Resume(ctx, h.Config(), sb.ID())
	if err != nil {
		t.Fatalf("Resume(%q): %v", sb.ID(), err)
	}
	t.Cleanup(func() { cleanup(t, h, again) })
	if again.ID() != sb.ID() {
		t.Errorf("resumed ID %q, want %q", again.ID(), sb.ID())
	}
	impl, scope := implemented(again, sandboxLevel)
	for _, msg := range declaredMismatch(h.Driver().Name(), "resumed sandbox", h.Driver().Capabilities().Declared, impl, scope) {
		t.Error(msg)
	}
	if got := string(execOK(t, ctx, again, drivers.Command{Argv: []string{"echo", "after"}}).Stdout); got != "after\n" {
		t.Errorf("echo after resume: %q", got)
	}
}

func testKeepResume(t *testing.T, ctx context.Context, h Harness) {
	r, err := drivers.DriverAs[drivers.Resumer](h.Driver())
	if err != nil {
		t.Fatal(err)
	}
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	if _, err := sb.Release(ctx, drivers.Keep); err != nil {
		t.Fatalf("Release(keep): %v", err)
	}
	if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}}); !errors.Is(err, drivers.ErrReleased) {
		t.Errorf("Exec on a kept handle: err = %v, want ErrReleased", err)
	}
	again, err := r.Resume(ctx, h.Config(), sb.ID())
	if err != nil {
		t.Fatalf("Resume of a kept sandbox: %v", err)
	}
	t.Cleanup(func() { cleanup(t, h, again) })
	if got := string(execOK(t, ctx, again, drivers.Command{Argv: []string{"echo", "kept"}}).Stdout); got != "kept\n" {
		t.Errorf("echo in a resumed kept sandbox: %q", got)
	}
}

// LEASE-9: sweeps find sandboxes by label, and only those.
func testList(t *testing.T, ctx context.Context, h Harness) {
	l, err := drivers.DriverAs[drivers.Lister](h.Driver())
	if err != nil {
		t.Fatal(err)
	}
	run := uniqueSuffix()
	a := acquire(t, ctx, h, drivers.AcquireRequest{Labels: map[string]string{"berth.test/run": run, "berth.test/which": "a"}})
	b := acquire(t, ctx, h, drivers.AcquireRequest{Labels: map[string]string{"berth.test/run": run, "berth.test/which": "b"}})
	ids := func(labels map[string]string) []string {
		infos, err := l.List(ctx, h.Config(), labels)
		if err != nil {
			t.Fatalf("List(%v): %v", labels, err)
		}
		var out []string
		for _, i := range infos {
			out = append(out, i.ProviderLeaseID)
			if i.ProviderLeaseID == a.ID() && i.Labels["berth.test/which"] != "a" {
				t.Errorf("List reported labels %v for %q", i.Labels, a.ID())
			}
		}
		return out
	}
	got := ids(map[string]string{"berth.test/run": run, "berth.test/which": "a"})
	if !slices.Contains(got, a.ID()) || slices.Contains(got, b.ID()) {
		t.Errorf("List(which=a) = %v, want %q and not %q", got, a.ID(), b.ID())
	}
	got = ids(map[string]string{"berth.test/run": run})
	if !slices.Contains(got, a.ID()) || !slices.Contains(got, b.ID()) {
		t.Errorf("List(run) = %v, want both %q and %q", got, a.ID(), b.ID())
	}
	if _, err := a.Release(ctx, drivers.Destroy); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := ids(map[string]string{"berth.test/run": run}); slices.Contains(got, a.ID()) {
		t.Errorf("List after destroy still reports %q: %v", a.ID(), got)
	}
}

func testDestroyByID(t *testing.T, ctx context.Context, h Harness) {
	ds, err := drivers.DriverAs[drivers.Destroyer](h.Driver())
	if err != nil {
		t.Fatal(err)
	}
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	for i := range 2 {
		r, err := ds.Destroy(ctx, h.Config(), sb.ID())
		if err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
		if !r.Proves(sb.ID(), drivers.Destroy) {
			t.Errorf("Destroy #%d: receipt %+v does not prove destroy of %q", i+1, r, sb.ID())
		}
	}
	if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}}); err == nil {
		t.Errorf("Exec in a destroyed sandbox succeeded")
	}
	unknown := "berth-conformance-no-such-sandbox-" + uniqueSuffix()
	if r, err := ds.Destroy(ctx, h.Config(), unknown); err != nil || !r.Proves(unknown, drivers.Destroy) {
		t.Errorf("Destroy of an unknown id: %+v, %v; want a confirmed destroyed receipt for it", r, err)
	}
}

// IMG-3: the live identity is an immutable one.
func testImageIdentity(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	ir, err := drivers.SandboxAs[drivers.ImageReporter](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	id, err := ir.ImageIdentity(ctx)
	if err != nil {
		t.Fatalf("ImageIdentity: %v", err)
	}
	if id.IsZero() {
		t.Errorf("ImageIdentity = %q, want a digest or snapshot", id)
	}
	if round, err := images.ParseIdentity(id.String()); err != nil || round != id {
		t.Errorf("identity %q does not round-trip: %v, %v", id, round, err)
	}
}

func testStreamExec(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	out, errw := newWatcher(), newWatcher()
	p, err := se.Start(ctx, sh(scriptStream), out, errw)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out.waitFor(t, "one\n") // streamed before the process ends
	errw.waitFor(t, "two\n")
	if err := p.CloseStdin(); err != nil {
		t.Errorf("CloseStdin: %v", err)
	}
	var res *drivers.Result
	within(t, bound, "Wait", func() { res, err = p.Wait(ctx) })
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if res.ExitCode != 4 || out.String() != "one\n" || errw.String() != "two\n" {
		t.Errorf("exit %d stdout %q stderr %q, want 4 %q %q", res.ExitCode, out, errw, "one\n", "two\n")
	}
	in := drivers.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("piped\n")}
	cat := newWatcher()
	p, err = se.Start(ctx, in, cat, nil)
	if err != nil {
		t.Fatalf("Start cat: %v", err)
	}
	within(t, bound, "Wait for cat", func() { res, err = p.Wait(ctx) })
	if err != nil || res.ExitCode != 0 || cat.String() != "piped\n" {
		t.Errorf("cat with stdin: %v exit %v stdout %q", err, res, cat)
	}
}

func testStreamKill(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	out := newWatcher()
	p, err := se.Start(ctx, sh(scriptReady), out, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out.waitFor(t, "ready")
	if err := p.Signal(ctx, "KILL"); err != nil {
		t.Fatalf("Signal(KILL): %v", err)
	}
	var res *drivers.Result
	within(t, promptBound, "Wait after KILL", func() { res, err = p.Wait(ctx) })
	if err == nil && res.ExitCode == 0 {
		t.Errorf("a killed process exited 0")
	}
}

func testStreamCancel(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := newWatcher()
	p, err := se.Start(cctx, sh(scriptReady), out, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out.waitFor(t, "ready")
	cancel()
	within(t, promptBound, "Wait after cancel", func() { _, err = p.Wait(ctx) })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel: err = %v, want it to wrap context.Canceled", err)
	}
}

// IMG-5: the terminal echoes input, runs it, and resizes.
func testTerminal(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	tm, err := drivers.SandboxAs[drivers.Terminal](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tm.OpenTerminal(ctx, drivers.TerminalRequest{Argv: []string{"sh"}, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatalf("OpenTerminal: %v", err)
	}
	defer ts.Close()
	out := newWatcher()
	pumped := pump(ts, out)
	if _, err := io.WriteString(ts, "echo berth\"\"-term-ok\n"); err != nil {
		t.Fatalf("Write: %v", err)
	}
	// The echo of the input: its quotes are in the echo only, never in
	// the command's output. The echo may come in pieces: input typed
	// before the shell's line editor took the terminal is echoed by the
	// terminal, then the editor redraws the line (busybox's ash under
	// gVisor: "echo \r/ # echo \x1b[Jberth\"\"-term-ok").
	out.waitFor(t, `berth""-term-ok`)
	out.waitFor(t, "berth-term-ok\r\n") // the command's output
	if err := ts.Resize(ctx, 30, 100); err != nil {
		t.Errorf("Resize: %v", err)
	}
	// Wait honours its context: a cancelled Wait returns promptly and the
	// session stays open.
	wctx, wcancel := context.WithCancel(ctx)
	wcancel()
	within(t, promptBound, "terminal Wait with a cancelled context", func() { _, err = ts.Wait(wctx) })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("terminal Wait with a cancelled context: err = %v, want it to wrap context.Canceled", err)
	}
	if _, err := io.WriteString(ts, "echo still\"\"-open\n"); err != nil {
		t.Fatalf("Write after a cancelled Wait: %v", err)
	}
	out.waitFor(t, "still-open\r\n")
	if _, err := io.WriteString(ts, "exit 5\n"); err != nil {
		t.Fatalf("Write exit: %v", err)
	}
	var res *drivers.Result
	within(t, bound, "terminal Wait after exit", func() { res, err = ts.Wait(ctx) })
	if err != nil || res == nil || res.ExitCode != 5 {
		t.Errorf("terminal Wait: %+v, %v; want exit 5", res, err)
	}
	ts.Close()
	within(t, bound, "terminal output end", func() { <-pumped })
}

// IMG-4: a capture yields a new immutable identity; template delete removes
// it. IMG-8: while a sandbox started from the template is live, a delete
// either succeeds (a provider that allows it) without breaking that sandbox,
// or fails with ErrInUse, unconfirmed, and leaves the template usable; after
// the sandbox is released the delete succeeds with a confirmed receipt, and
// deleting a template that is gone is confirmed too.
func testCapture(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	c, err := drivers.SandboxAs[drivers.Capturer](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Capture(ctx, drivers.CaptureRequest{Name: "berth-conformance-" + uniqueSuffix()})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if id.IsZero() {
		t.Fatalf("Capture = %q, want a digest or snapshot", id)
	}
	var from drivers.Sandbox // live, started from the template
	ih, canAcquire := h.(ImageHarness)
	if canAcquire {
		cfg, ok := ih.ConfigWithImage(id)
		if canAcquire = ok; ok {
			from, err = h.Driver().Acquire(ctx, cfg, drivers.AcquireRequest{})
			if err != nil {
				t.Fatalf("Acquire of the captured image: %v", err)
			}
			t.Cleanup(func() { cleanup(t, h, from) })
		}
	}
	if !drivers.Effective(h.Driver(), 0).Has(drivers.CapTemplateDelete) {
		return
	}
	td, err := drivers.DriverAs[drivers.TemplateDeleter](h.Driver())
	if err != nil {
		t.Fatal(err)
	}
	if from != nil {
		deleteInUse(t, ctx, h, td, id, from)
	}
	for i := range 2 { // deleting one that is gone succeeds, confirmed
		rc, err := td.DeleteTemplate(ctx, h.Config(), id)
		if err != nil {
			t.Fatalf("DeleteTemplate #%d: %v", i+1, err)
		}
		if !rc.Confirmed || rc.State != drivers.StateDestroyed || rc.Evidence == "" || rc.EvidenceKind != drivers.EvidenceProvider {
			t.Errorf("DeleteTemplate #%d: receipt %+v, want a confirmed StateDestroyed receipt with the provider's evidence", i+1, rc)
		}
	}
	if canAcquire {
		cfg, _ := ih.ConfigWithImage(id)
		sb2, err := h.Driver().Acquire(ctx, cfg, drivers.AcquireRequest{})
		if err == nil {
			cleanup(t, h, sb2)
		}
		if !errors.Is(err, drivers.ErrImageNotFound) {
			t.Errorf("Acquire of a deleted template: err = %v, want ErrImageNotFound", err)
		}
	}
}

// deleteInUse deletes template id while from, a sandbox started from it, is
// live, checks the outcome (a confirmed receipt, or ErrInUse with the
// template still usable), that from still runs, and releases from.
func deleteInUse(t *testing.T, ctx context.Context, h Harness, td drivers.TemplateDeleter, id images.Identity, from drivers.Sandbox) {
	t.Helper()
	rc, err := td.DeleteTemplate(ctx, h.Config(), id)
	switch {
	case err == nil:
		if !rc.Confirmed || rc.State != drivers.StateDestroyed || rc.Evidence == "" || rc.EvidenceKind != drivers.EvidenceProvider {
			t.Errorf("DeleteTemplate while a sandbox of it is live succeeded with receipt %+v, want a confirmed StateDestroyed receipt with the provider's evidence", rc)
		}
	case errors.Is(err, drivers.ErrInUse):
		if rc.Confirmed {
			t.Errorf("DeleteTemplate refused with ErrInUse returned a confirmed receipt %+v", rc)
		}
		if !strings.Contains(err.Error(), id.String()) && (id.SnapshotID() == "" || !strings.Contains(err.Error(), id.SnapshotID())) {
			t.Errorf("DeleteTemplate refused with %q, which does not name the template %s", err, id)
		}
		// The refusal took nothing: the template still starts sandboxes.
		cfg, _ := h.(ImageHarness).ConfigWithImage(id)
		again, err := h.Driver().Acquire(ctx, cfg, drivers.AcquireRequest{})
		if err != nil {
			t.Fatalf("Acquire of the template after DeleteTemplate refused it as in use: %v", err)
		}
		t.Cleanup(func() { cleanup(t, h, again) })
		res := execOK(t, ctx, again, drivers.Command{Argv: []string{"echo", "still-usable"}})
		if string(res.Stdout) != "still-usable\n" {
			t.Errorf("a sandbox of the template after the refused delete: stdout %q", res.Stdout)
		}
		if _, err := again.Release(ctx, drivers.Destroy); err != nil {
			t.Fatalf("Release: %v", err)
		}
	default:
		t.Fatalf("DeleteTemplate while a sandbox of it is live: %v; want success or ErrInUse", err)
	}
	res := execOK(t, ctx, from, drivers.Command{Argv: []string{"echo", "alive"}})
	if string(res.Stdout) != "alive\n" {
		t.Errorf("the sandbox of the template after DeleteTemplate: stdout %q", res.Stdout)
	}
	if _, err := from.Release(ctx, drivers.Destroy); err != nil {
		t.Fatalf("Release of the template's sandbox: %v", err)
	}
}

func testRunnerIngress(t *testing.T, ctx context.Context, h Harness) {
	rh, ok := h.(RunnerHarness)
	if !ok {
		t.Fatalf("the driver declares %s but the harness does not implement drivertest.RunnerHarness", drivers.CapRunnerIngress)
	}
	spec := rh.RunnerSpec(t)
	sb := acquire(t, ctx, h, drivers.AcquireRequest{LeaseID: "runner-ingress-" + uniqueSuffix(), Runner: &spec})
	host, err := drivers.SandboxAs[drivers.RunnerHost](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	// Twice: the second ingress opens where the first was (a stale socket
	// of a closed ingress must not stand in its way) and installs nothing
	// new, and a second runner reaches the host through it.
	for round := range 2 {
		in, err := host.HostRunner(ctx, spec)
		if err != nil {
			t.Fatalf("round %d: HostRunner: %v", round, err)
		}
		ep := in.Endpoint()
		if !validEndpoint(ep) {
			t.Errorf("round %d: Endpoint = %q, want unix:/absolute/path or an absolute http(s)/ws(s) URL", round, ep)
		}
		if round == 0 {
			if in2, err := host.HostRunner(ctx, spec); err == nil {
				in2.Close()
				t.Errorf("HostRunner while an ingress is open succeeded, want an error")
			}
		}
		got := make(chan exchangeSeen, 4)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var xr struct{ Ticket, Lease string }
			body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<10))
			_ = json.Unmarshal(body, &xr)
			select { // never block the refusal on a full channel
			case got <- exchangeSeen{method: r.Method, path: r.URL.Path, ticket: xr.Ticket, lease: xr.Lease}:
			default:
			}
			// Refuse, so that the runner gives up and exits.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"code":"ticket_unknown","message":"conformance refusal"}`)
		})}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(in) }()
		ticket := randomHex(t, 32)
		lease := fmt.Sprintf("conformance-lease-%d", round)
		if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: lease, Ticket: ticket, Env: map[string]string{"BERTH_CONFORMANCE": "1"}}); err != nil {
			srv.Close()
			t.Fatalf("round %d: Launch: %v", round, err)
		}
		timeout := time.After(time.Until(deadlineOr(ctx, 90*time.Second)))
	wait:
		for {
			select {
			case x := <-got:
				if x.method != http.MethodPost || !strings.HasSuffix(x.path, "/exchange") {
					t.Errorf("round %d: the runner sent %s %s, want POST .../exchange", round, x.method, x.path)
				}
				if round > 0 && x.lease == "conformance-lease-0" {
					// The first round's runner, whose refusal may have
					// been cut by the server's shutdown, retrying: closing
					// an ingress stops no runner.
					continue
				}
				if x.ticket != ticket || x.lease != lease {
					t.Errorf("round %d: the runner exchanged ticket %q for lease %q, want the launched ticket for %q", round, x.ticket, x.lease, lease)
				}
				break wait
			case <-timeout:
				t.Errorf("round %d: no runner reached the host through the ingress at %s", round, ep)
				break wait
			}
		}
		// Shutdown lets the refusal reach the runner, which then exits.
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		cancel()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			t.Errorf("round %d: serving the ingress: %v", round, err)
		}
		if err := in.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("round %d: closing the ingress: %v", round, err)
		}
		checkRunnerLogTail(t, ctx, in, round, ticket)
	}
}

// checkRunnerLogTail: after the refused exchange, the runner's log tail is
// readable (also after Close), bounded by its max, not empty once the
// runner has written its refusal, and never holds the ticket.
func checkRunnerLogTail(t *testing.T, ctx context.Context, in drivers.RunnerIngress, round int, ticket string) {
	t.Helper()
	deadline := time.Now().Add(time.Until(deadlineOr(ctx, 30*time.Second)))
	var tail []byte
	for {
		b, err := in.LogTail(ctx, driverkit.ClampLogTail(math.MaxInt))
		if err != nil {
			t.Errorf("round %d: LogTail after the refused exchange: %v", round, err)
			return
		}
		if strings.Contains(string(b), ticket) {
			t.Fatalf("round %d: the runner's log holds the ticket: %q", round, b)
		}
		tail = b
		if bytes.Contains(b, []byte("ticket_unknown")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the runner writes its refusal as it exits
	}
	if len(tail) == 0 {
		t.Errorf("round %d: LogTail after the refused exchange is empty, want the runner's log", round)
	} else if !bytes.Contains(tail, []byte("ticket_unknown")) {
		t.Logf("round %d: the runner's log does not name the refusal (ticket_unknown) yet: %q", round, tail)
	}
	if b, err := in.LogTail(ctx, 8); err != nil || len(b) > 8 {
		t.Errorf("round %d: LogTail(8) = %d bytes, %v; want at most 8", round, len(b), err)
	}
}

// A driver without runner ingress (undeclared, or narrowed away by the
// config) refuses an Acquire with a Runner: the error wraps ErrUnsupported
// and names runner_ingress, Allocated is never called, and, where the
// driver lists sandboxes, none carries the request's labels.
func testRunnerRefused(t *testing.T, ctx context.Context, h Harness) {
	var spec drivers.RunnerSpec
	if rh, ok := h.(RunnerHarness); ok {
		spec = rh.RunnerSpec(t)
	} else {
		// A real file with its real sum, so that a refusal cannot be
		// about the file.
		spec.Binary = filepath.Join(t.TempDir(), "berth-runner")
		body := []byte("#!/bin/sh\nexit 0\n")
		if err := os.WriteFile(spec.Binary, body, 0o755); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		spec.SHA256 = hex.EncodeToString(sum[:])
	}
	labels := map[string]string{"berth.test/run": uniqueSuffix(), "berth.test/which": "runner-refused"}
	var allocated []string
	var mu sync.Mutex
	sb, err := h.Driver().Acquire(ctx, h.Config(), drivers.AcquireRequest{
		LeaseID: "runner-refused-" + uniqueSuffix(), Labels: labels, Runner: &spec,
		Allocated: func(_ context.Context, id string) error {
			mu.Lock()
			defer mu.Unlock()
			allocated = append(allocated, id)
			return nil
		},
	})
	if err == nil {
		cleanup(t, h, sb)
		t.Fatalf("driver %q does not offer %s, yet Acquire with a Runner succeeded (%s); want an error wrapping ErrUnsupported",
			h.Driver().Name(), drivers.CapRunnerIngress, sb.ID())
	}
	if !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("Acquire with a Runner: err = %v, want it to wrap ErrUnsupported (errors.Is)", err)
	}
	if !strings.Contains(err.Error(), drivers.CapRunnerIngress.String()) {
		t.Errorf("Acquire with a Runner: err = %v, want it to name %s", err, drivers.CapRunnerIngress)
	}
	mu.Lock()
	if len(allocated) > 0 {
		t.Errorf("Acquire with a Runner called Allocated with %v before refusing, want nothing allocated", allocated)
	}
	mu.Unlock()
	if l, lerr := drivers.DriverAs[drivers.Lister](h.Driver()); lerr == nil {
		infos, err := l.List(ctx, h.Config(), labels)
		if err != nil {
			t.Fatalf("List(%v): %v", labels, err)
		}
		for _, i := range infos {
			t.Errorf("Acquire with a Runner was refused but left sandbox %s (%s) carrying its labels", i.ProviderLeaseID, i.State)
			if ds, derr := drivers.DriverAs[drivers.Destroyer](h.Driver()); derr == nil {
				_, _ = ds.Destroy(ctx, h.Config(), i.ProviderLeaseID)
			}
		}
	}
}

// exchangeSeen is one request a runner made through an ingress.
type exchangeSeen struct{ method, path, ticket, lease string }

// validEndpoint reports whether ep is a runner's --controller value.
func validEndpoint(ep string) bool {
	if p, ok := strings.CutPrefix(ep, "unix:"); ok {
		return strings.HasPrefix(p, "/")
	}
	u, err := url.Parse(ep)
	return err == nil && u.IsAbs() && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https" || u.Scheme == "ws" || u.Scheme == "wss")
}

// deadlineOr returns ctx's deadline, or now+d without one.
func deadlineOr(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}

// randomHex returns n random bytes in hex.
func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// CONVENTIONS 7: Wait honours its own context: it returns promptly with
// ctx's error and leaves the process running; a later Wait gets the exit.
func testStreamWaitContext(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	out := newWatcher()
	p2, err := se.Start(ctx, sh(scriptReady), out, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	out.waitFor(t, "ready")
	wctx, wcancel := context.WithCancel(ctx)
	wcancel()
	var res *drivers.Result
	within(t, promptBound, "Wait with a cancelled context", func() { res, err = p2.Wait(wctx) })
	if !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("Wait with a cancelled context: %+v, %v; want nil and an error wrapping context.Canceled", res, err)
	}
	if err := p2.Signal(ctx, "KILL"); err != nil {
		t.Fatalf("Signal(KILL) after the abandoned Wait: %v", err)
	}
	within(t, promptBound, "Wait after KILL", func() { res, err = p2.Wait(ctx) })
	if err == nil && res.ExitCode == 0 {
		t.Errorf("the process was not running after the abandoned Wait: exit 0")
	}
}

// blockingStdin is the read end of an os.Pipe that nobody writes to: a Read
// blocks until the pipe's read deadline is set. ended is closed when a Read
// returned an error.
type blockingStdin struct {
	*os.File
	once  sync.Once
	ended chan struct{}
}

func (r *blockingStdin) Read(b []byte) (int, error) {
	n, err := r.File.Read(b)
	if err != nil {
		r.once.Do(func() { close(r.ended) })
	}
	return n, err
}

// The goroutine that copies Command.Stdin does not outlive the process: a
// command that exits without reading a stdin that never ends (a pipe with
// deadlines) leaves no copy blocked in Read once Wait returned.
func testStdinCopyEndsWithProcess(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	defer r.Close()
	in := &blockingStdin{File: r, ended: make(chan struct{})}
	p, err := se.Start(ctx, drivers.Command{Argv: []string{"echo", "done"}, Stdin: in}, nil, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var res *drivers.Result
	within(t, bound, "Wait", func() { res, err = p.Wait(ctx) })
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("echo done: %+v, %v", res, err)
	}
	within(t, promptBound, "the stdin copy to end after the process", func() { <-in.ended })
}
