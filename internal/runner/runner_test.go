package runner_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/runner"
	"github.com/berthdev/berth/qualification"
)

func fastBackoff(int) time.Duration { return 20 * time.Millisecond }

// startRunner runs a runner in-process until the test ends; the returned
// channel yields Run's error.
func startRunner(t *testing.T, c *testController, dir string, opts runner.Options) (*runner.Runner, <-chan error) {
	t.Helper()
	if opts.Lease == "" {
		opts.Lease = "lease-1"
	}
	if opts.Backoff == nil {
		opts.Backoff = fastBackoff
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = time.Second
	}
	r, err := runner.New(c.URL(), dir, &opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{}) // closed after Run, whether or not the test read done
	go func() { done <- r.Run(ctx); close(finished) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(time.Minute):
			t.Error("runner did not stop")
		}
	})
	return r, done
}

// PRP-6: output bytes arrive byte for byte (invalid UTF-8 included), with
// the exit code in the exit event and in the command's result.
func TestTaskOutputAndExit(t *testing.T) {
	t.Parallel()
	c := newController(t)
	startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	start := startCmd("c1", "t1", "sh", "-c", `printf '\377\376abc\000'; printf "$GREETING" >&2; printf "$BERTH_TASK_TAG" >&2; exit 3`)
	start.TaskStart.Env = map[string]string{"GREETING": "hi:"}
	c.command(start)
	res := c.waitResults("c1", 1)[0]
	if res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 3 || res.Duplicate {
		t.Fatalf("result = %+v, want done with exit 3", res)
	}
	if got := c.output("t1", prp.Stdout); !bytes.Equal(got, []byte{0xff, 0xfe, 'a', 'b', 'c', 0}) {
		t.Errorf("stdout = %q", got)
	}
	stderr := string(c.output("t1", prp.Stderr))
	if !strings.HasPrefix(stderr, "hi:r") || !strings.HasSuffix(stderr, ":t1") {
		t.Errorf("stderr = %q, want the task env and the tag <runner id>:t1", stderr)
	}
	if ex := c.eventsOf(prp.EventExit, "t1"); len(ex) != 1 || ex[0].Exit.Code != 3 {
		t.Errorf("exit events = %+v", ex)
	}
	c.mu.Lock()
	h := c.hellos[0]
	c.mu.Unlock()
	if h.Platform.OS != runtime.GOOS || h.RunnerVersion != runner.Version || len(h.BinarySHA256) != 64 {
		t.Errorf("hello = %+v", h)
	}
}

// PRP-4: a redelivered command returns the stored result marked duplicate
// and runs nothing; the same id with another body is a conflict.
func TestDuplicateAndConflict(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	startRunner(t, c, filepath.Join(dir, "state"), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	cmd := startCmd("c1", "t1", "sh", "-c", "echo ran >> "+marker)
	c.command(cmd)
	first := c.waitResults("c1", 1)[0]
	c.command(cmd)
	dup := c.waitResults("c1", 2)[1]
	if !dup.Duplicate || dup.Status != first.Status || dup.Exit == nil || dup.Exit.Code != 0 {
		t.Errorf("duplicate result = %+v, want the stored result marked duplicate", dup)
	}
	other := startCmd("c1", "t1", "sh", "-c", "echo other >> "+marker)
	c.command(other)
	conflict := c.waitResults("c1", 3)[2]
	if conflict.Status != prp.ResultRejected || conflict.Code != prpwire.CodeIdempotencyConflict {
		t.Errorf("conflict result = %+v, want rejected idempotency_conflict", conflict)
	}
	if b, _ := os.ReadFile(marker); string(b) != "ran\n" {
		t.Errorf("marker = %q, want one run", b)
	}
	// The task id cannot be reused by another command.
	c.command(startCmd("c2", "t1", "true"))
	if res := c.waitResults("c2", 1)[0]; res.Code != prpwire.CodeTaskExists {
		t.Errorf("reused task id: %+v, want task_exists", res)
	}
	c.mu.Lock()
	acked := c.cmdAcked
	c.mu.Unlock()
	if acked < 3 {
		t.Errorf("runner acked commands up to %d, want at least 3", acked)
	}
}

// PRP-8: a probe identity answers hello (platform, version) and refuses
// every task; nothing runs.
func TestProbeIdentityRefusesEveryTask(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	plat := mustPlatform("linux/amd64 libc=musl:1.2.4 kernel=6.1.0")
	startRunner(t, c, filepath.Join(dir, "state"), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeProbe, time.Minute),
		Platform: func(context.Context) (qualification.Platform, error) { return plat, nil }})
	c.command(startCmd("c1", "t1", "sh", "-c", "touch "+marker))
	c.command(stopCmd("c2", "t1", 0))
	for _, id := range []string{"c1", "c2"} {
		if res := c.waitResults(id, 1)[0]; res.Status != prp.ResultRejected || res.Code != prpwire.CodeProbeIdentity {
			t.Errorf("%s under a probe identity: %+v, want rejected probe_identity", id, res)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the probe ran a task: %v", err)
	}
	c.mu.Lock()
	h := c.hellos[0]
	c.mu.Unlock()
	if h.Platform != plat {
		t.Errorf("hello platform = %v, want %v", h.Platform, plat)
	}
}

// PRP-7: a command for another lease or run is denied; nothing runs.
func TestScopeDenied(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	startRunner(t, c, filepath.Join(dir, "state"), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	cmd := startCmd("c1", "t1", "sh", "-c", "touch "+marker)
	cmd.Lease, cmd.Run = "lease-2", "run-1"
	c.command(cmd)
	other := startCmd("c2", "t2", "sh", "-c", "touch "+marker)
	other.Lease, other.Run = "lease-1", "run-2"
	c.command(other)
	for _, id := range []string{"c1", "c2"} {
		if res := c.waitResults(id, 1)[0]; res.Status != prp.ResultRejected || res.Code != prpwire.CodeScopeDenied {
			t.Errorf("%s: %+v, want rejected scope_denied", id, res)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a denied command ran: %v", err)
	}
}

// PRP-2: expired, replayed, foreign and unknown tickets are refused with
// their codes before any upgrade; the runner gives up (no retry helps).
func TestTicketRefused(t *testing.T) {
	t.Parallel()
	c := newController(t)
	replayed := c.ticket("lease-1", prp.ScopeTask, time.Minute)
	if _, _, err := c.x.Exchange(context.Background(), prpwire.ExchangeRequest{Ticket: replayed, Lease: "lease-1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	unknown, _ := prp.NewTicket()
	for _, tc := range []struct{ name, ticket, code string }{
		{"expired", c.ticket("lease-1", prp.ScopeTask, time.Millisecond), "ticket_expired"},
		{"replayed", replayed, "ticket_replayed"},
		{"foreign", c.ticket("lease-2", prp.ScopeTask, time.Minute), "ticket_foreign"},
		{"unknown", unknown.String(), "ticket_unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "expired" {
				time.Sleep(5 * time.Millisecond) // let the 1 ms ticket expire
			}
			r, err := runner.New(c.URL(), t.TempDir(), &runner.Options{Lease: "lease-1", Ticket: tc.ticket, Backoff: fastBackoff})
			if err != nil {
				t.Fatal(err)
			}
			err = r.Run(context.Background())
			if !errors.Is(err, runner.ErrRefused) || !strings.Contains(err.Error(), tc.code) {
				t.Errorf("Run = %v, want ErrRefused with %s", err, tc.code)
			}
			if strings.Contains(err.Error(), tc.ticket[6:]) {
				t.Errorf("the error quotes the ticket: %v", err)
			}
		})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns != 0 {
		t.Errorf("%d connections were upgraded with refused tickets", c.conns)
	}
}

// PRP-3: no common version: the controller closes with
// CloseVersionUnsupported and the runner gives up.
func TestVersionNegotiationFails(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.minV, c.maxV = prpwire.MaxVersion+1, prpwire.MaxVersion+2
	r, err := runner.New(c.URL(), t.TempDir(), &runner.Options{Lease: "lease-1", Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute), Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(context.Background())
	if !errors.Is(err, runner.ErrRefused) || !strings.Contains(err.Error(), "4004") {
		t.Errorf("Run = %v, want ErrRefused with close code 4004", err)
	}
}

// PRP-2: a token the controller does not accept is refused with 401 before
// the upgrade; the runner gives up with the controller's code.
func TestInvalidTokenRefusedBeforeUpgrade(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	other, err := prp.NewSigner("k9", map[string][]byte{"k9": []byte(strings.Repeat("o", 32))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := prpwire.Mint(other, prpwire.Claims{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, Session: "s_x", IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c.forged = tok
	r, err := runner.New(c.URL(), dir, &runner.Options{Lease: "lease-1", Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute), Backoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(context.Background())
	if !errors.Is(err, runner.ErrRefused) || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "token_invalid") {
		t.Errorf("Run = %v, want ErrRefused with HTTP 401 token_invalid", err)
	}
	if strings.Contains(err.Error(), tok) {
		t.Error("the error quotes the token")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns != 0 {
		t.Errorf("%d connections upgraded with an invalid token", c.conns)
	}
}

// mustPlatform is qualification.ParsePlatform that panics on error.
func mustPlatform(s string) qualification.Platform {
	p, err := qualification.ParsePlatform(s)
	if err != nil {
		panic(err)
	}
	return p
}
