package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/runner"
)

// PRP-6: a task past its deadline is stopped (with a proof) and its exit
// says timed out; output past the output limit is cut and marked.
func TestDeadlineAndOutputLimit(t *testing.T) {
	t.Parallel()
	c := newController(t)
	startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	slow := startCmd("c1", "t1", "sleep", "300")
	slow.TaskStart.Deadline = time.Now().Add(200 * time.Millisecond)
	c.command(slow)
	loud := startCmd("c2", "t2", "sh", "-c", "printf 0123456789abcdef; printf more >&2")
	loud.TaskStart.OutputLimit = 10
	c.command(loud)
	if res := c.waitResults("c1", 1)[0]; res.Exit == nil || !res.Exit.TimedOut || res.Exit.Signal == "" {
		t.Errorf("deadline result = %+v, want timed out by signal", res)
	}
	c.waitFor("t1's proof", func() bool {
		for _, e := range c.events {
			if e.Kind == prp.EventProof && e.TaskID == "t1" {
				return e.Proof.Complete
			}
		}
		return false
	})
	res := c.waitResults("c2", 1)[0]
	if res.Exit == nil || !res.Exit.Truncated || res.Exit.Code != 0 {
		t.Errorf("output limit result = %+v, want truncated, exit 0", res)
	}
	if n := len(c.output("t2", prp.Stdout)) + len(c.output("t2", prp.Stderr)); n != 10 {
		t.Errorf("%d output bytes kept, want the limit 10", n)
	}
}

// PRP-6: stdin bytes reach the task; a stop of an unknown task is refused.
func TestStdinAndUnknownStop(t *testing.T) {
	t.Parallel()
	c := newController(t)
	startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	cat := startCmd("c1", "t1", "cat")
	cat.TaskStart.Stdin = []byte{0, 1, 2, 0xff}
	c.command(cat)
	c.command(stopCmd("c2", "nope", 0))
	c.waitResults("c1", 1)
	if got := c.output("t1", prp.Stdout); !bytes.Equal(got, []byte{0, 1, 2, 0xff}) {
		t.Errorf("cat echoed %v", got)
	}
	if res := c.waitResults("c2", 1)[0]; res.Status != prp.ResultRejected || res.Code != prpwire.CodeUnknownTask {
		t.Errorf("stop of an unknown task = %+v, want unknown_task", res)
	}
	// A stop of a task that already ended still verifies, with a proof.
	c.command(stopCmd("c3", "t1", 0))
	if res := c.waitResults("c3", 1)[0]; res.Status != prp.ResultDone || res.Proof == nil || !res.Proof.Complete {
		t.Errorf("stop of an ended task = %+v, want a complete proof", res)
	}
}

// Liveness: a controller that stops answering pings is left after the
// dead-after interval; the runner reconnects.
func TestHeartbeatDetectsDeadController(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.limits.Heartbeat, c.limits.DeadAfter = 50*time.Millisecond, 150*time.Millisecond
	startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	c.mu.Lock()
	c.mute = true
	c.mu.Unlock()
	c.waitFor("a reconnect", func() bool {
		if c.conns >= 2 {
			c.mute = false
		}
		return c.conns >= 2
	})
}

// PRP-2, issue 22: a renewed token replaces the one in the runner's memory
// (the next connection presents it) and is never written to the state
// directory, where the runner's tasks could read it; a token file an older
// runner left there is removed, and no ticket means no runner.
func TestTokenRenewalIsKeptInMemoryOnly(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	if _, err := runner.New(c.URL(), dir, &runner.Options{Lease: "lease-1"}); err == nil {
		t.Fatal("New without a ticket succeeded, want an error (the token is not stored)")
	}
	if err := os.WriteFile(filepath.Join(dir, "credentials.json"), []byte(`{"token":"old"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	startRunner(t, c, dir, runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	if _, err := os.Stat(filepath.Join(dir, "credentials.json")); !os.IsNotExist(err) {
		t.Errorf("the old token file is still in the state directory (%v)", err)
	}
	session := c.session()
	now := time.Now()
	tok, err := prpwire.Mint(c.x.Signer, prpwire.Claims{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, Session: session, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(prpwire.TokenRenewal{Token: tok, ExpiresAt: now.Add(time.Hour)})
	c.sendRaw(prpwire.Envelope{Protocol: prpwire.Protocol, Version: 1, Type: prpwire.TypeToken, ID: "m-tok", Body: body})
	// The renewal is read before the next frame: a command after it is
	// journaled only once the token is taken.
	c.command(startCmd("c1", "t1", "true"))
	c.waitResults("c1", 1)
	c.mu.Lock()
	c.conn.CloseNow()
	c.mu.Unlock()
	c.waitFor("the reconnect", func() bool { return c.conns == 2 })
	c.mu.Lock()
	last := c.tokens[len(c.tokens)-1]
	c.mu.Unlock()
	if last != tok {
		t.Error("the reconnect did not present the renewed token")
	}
	if hits := filesContaining(t, dir, tok); len(hits) > 0 {
		t.Errorf("the token is in the state directory: %v", hits)
	}
}

// filesContaining returns the files under dir whose contents hold s.
func filesContaining(t *testing.T, dir, s string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(s)) {
			hits = append(hits, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// PRP "secrets in commands": a task.start with secret references whose
// values never arrived (no secrets frame: a runner restarted, a peer that
// forgot) is refused secrets_missing, and nothing runs.
func TestTaskWithoutItsSecretsNeverRuns(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	startRunner(t, c, filepath.Join(dir, "state"), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	cmd := startCmd("c1", "t1", "sh", "-c", "echo ran > "+marker)
	cmd.TaskStart.Secrets = []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "TOKEN", Env: "TOKEN"}}
	c.command(cmd)
	res := c.waitResults("c1", 1)[0]
	if res.Status != prp.ResultRejected || res.Code != prpwire.CodeSecretsMissing {
		t.Errorf("result = %+v, want rejected %s", res, prpwire.CodeSecretsMissing)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the task ran without its secrets: %v", err)
	}
}

// Issue 31: only a warm-pool member's runner (run prp.PoolRunPrefix...)
// takes a renewal that names another run; a tenant's runner refuses one
// (it closes the connection and keeps its token), so no renewal can point
// a lease's runner at another run.
func TestTokenRenewalForAnotherRunIsRefused(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	startRunner(t, c, dir, runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	session := c.session()
	now := time.Now()
	tok, err := prpwire.Mint(c.x.Signer, prpwire.Claims{Lease: "lease-1", Run: "run-2", Company: "co-1", Scope: prp.ScopeTask, Session: session, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(prpwire.TokenRenewal{Token: tok, ExpiresAt: now.Add(time.Hour), Run: "run-2"})
	c.sendRaw(prpwire.Envelope{Protocol: prpwire.Protocol, Version: 1, Type: prpwire.TypeToken, ID: "m-tok", Body: body})
	c.waitFor("the reconnect", func() bool { return c.conns == 2 })
	c.mu.Lock()
	last := c.tokens[len(c.tokens)-1]
	c.mu.Unlock()
	if last == tok {
		t.Error("the runner of run-1 took a renewal for run-2")
	}
	// Its commands are still run-1's.
	c.command(startCmd("c1", "t1", "true"))
	c.waitResults("c1", 1)
}

// One runner per state directory: a runner launched on the directory
// while another runner serves it (disconnected, waiting out a long
// backoff) exchanges nothing and returns ErrStateDirBusy, and the runner
// that holds the directory reconnects at once instead of after its
// backoff. Once that runner is gone, a runner on the directory runs.
func TestOneRunnerPerStateDirectory(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	slow := func(int) time.Duration { return time.Hour }
	_, firstDone := startRunner(t, c, dir, runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute), Backoff: slow})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	session := c.session()
	c.mu.Lock()
	c.conn.CloseNow()
	c.mu.Unlock()
	time.Sleep(100 * time.Millisecond) // the first runner is in its hour of backoff
	resume := c.resumeTicket(session)
	second, err := runner.New(c.URL(), dir, &runner.Options{Lease: "lease-1", Ticket: resume, Backoff: fastBackoff, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := second.Run(ctx); !errors.Is(err, runner.ErrStateDirBusy) {
		t.Fatalf("a second runner on the state directory: %v, want ErrStateDirBusy", err)
	}
	c.waitFor("the first runner's reconnect, nudged", func() bool { return c.conns == 2 })
	select {
	case err := <-firstDone:
		t.Fatalf("the first runner ended: %v", err)
	default:
	}
	// The resume ticket was not exchanged: it is still unused.
	tk, err := prp.ParseTicket(resume)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.ConsumeTicket(context.Background(), tk.Hash(), "lease-1", "s_probe", time.Now()); err != nil {
		t.Errorf("the busy runner's ticket: %v, want it unused", err)
	}
}
