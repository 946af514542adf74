//go:build unix

package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/runner"
)

// Adversarial review of issue 31's runner side: the retarget of a
// warm-pool member's runner and the state directory's lock and nudge
// files, which a hostile task can write.

// poolTicket is a one-use ticket of the instance for lease-1's pool run.
func poolTicket(t *testing.T, c *testController) string {
	t.Helper()
	tk, err := prp.NewTicket()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := c.store.CreateTicket(context.Background(), prp.TicketRecord{Hash: tk.Hash(), Lease: "lease-1", Run: prp.PoolRunPrefix + "lease-1",
		Company: "berth:instance", Scope: prp.ScopeTask, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	return tk.String()
}

// renew sends the runner a token renewal for run (claims of co-1).
func renew(t *testing.T, c *testController, session, run string) string {
	t.Helper()
	now := time.Now()
	tok, err := prpwire.Mint(c.x.Signer, prpwire.Claims{Lease: "lease-1", Run: run, Company: "co-1", Scope: prp.ScopeTask, Session: session, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(prpwire.TokenRenewal{Token: tok, ExpiresAt: now.Add(time.Hour), Run: run})
	c.sendRaw(prpwire.Envelope{Protocol: prpwire.Protocol, Version: 1, Type: prpwire.TypeToken, ID: "m-" + run, Body: body})
	return tok
}

// A warm-pool member's runner takes one retarget, to a tenant's run, and
// no other: not a second one (its run is a tenant's then), and not one to
// another pool run. A command for the tenant's run is refused before the
// retarget and runs after it. Held.
func TestPoolRunnerIsRetargetedOnce(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	startRunner(t, c, dir, runner.Options{Ticket: poolTicket(t, c)})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	session := c.session()

	// Before the retarget a command of run-1 is not the runner's.
	c.command(startCmd("c0", "t0", "true"))
	if r := c.waitResults("c0", 1); r[0].Status != prp.ResultRejected {
		t.Errorf("a run-1 command on the pool runner before its retarget: %+v, want rejected", r[0])
	}

	// To another pool run: refused (the runner drops the connection and
	// keeps its token).
	evil := renew(t, c, session, prp.PoolRunPrefix+"lease-2")
	c.waitFor("the reconnect after the refused retarget", func() bool { return c.conns == 2 })

	good := renew(t, c, session, "run-1")
	// The harness sends a wake's commands before its raw frames: the
	// command goes out once the renewal is on the wire.
	c.waitFor("the renewal sent", func() bool { return len(c.raw) == 0 })
	c.command(startCmd("c1", "t1", "true"))
	if r := c.waitResults("c1", 1); r[0].Status != prp.ResultDone {
		t.Errorf("a run-1 command after the retarget: %+v, want done", r[0])
	}
	// A second retarget: refused.
	renew(t, c, session, "run-2")
	c.waitFor("the reconnect after the second retarget", func() bool { return c.conns == 3 })
	c.mu.Lock()
	last := c.tokens[len(c.tokens)-1]
	all := strings.Join(c.tokens, ",")
	c.mu.Unlock()
	if last != good {
		t.Errorf("the runner reconnected with another token than the run-1 renewal's")
	}
	if strings.Contains(all, evil) {
		t.Error("the runner used the token of a renewal for another pool run")
	}
	c.command(startCmd("c2", "t2", "true"))
	if r := c.waitResults("c2", 1); r[0].Status != prp.ResultDone {
		t.Errorf("a run-1 command after the refused second retarget: %+v, want done", r[0])
	}
}

// A task that planted a symlink at the state directory's lock file (to a
// file of its user's elsewhere) does not get the runner to create, lock or
// truncate that file: the runner refuses the directory and runs nothing.
// Found broken: the lock was opened O_CREATE following the symlink, then
// truncated (the target lost its bytes). Fixed: O_NOFOLLOW, and a lock
// file that is not a regular file of one link is refused.
func TestStateDirLockFileSymlinkIsRefused(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "lock")); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "created")
	sub := t.TempDir()
	if err := os.Symlink(missing, filepath.Join(sub, "lock")); err != nil {
		t.Fatal(err)
	}
	hard := t.TempDir()
	if err := os.Link(victim, filepath.Join(hard, "lock")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, sub, hard} {
		r, err := runner.New(c.URL(), d, &runner.Options{Lease: "lease-1", Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute), Backoff: fastBackoff, StopGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = r.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "lock file") {
			t.Errorf("a runner on %s with a planted lock file: %v, want a refusal naming the lock file", d, err)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the lock's symlink target now holds %q, %v; want it untouched", b, err)
	}
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runner created the lock's symlink target %s: %v", missing, err)
	}
	c.mu.Lock()
	conns := c.conns
	c.mu.Unlock()
	if conns != 0 {
		t.Errorf("%d connections from refused runners, want 0", conns)
	}
}

// A task that planted a symlink at the nudge file does not get a runner
// launched on the busy directory to truncate the target; the live runner
// still reconnects at once (the planted entry counts as the nudge). Found
// broken: the nudge was os.WriteFile, which follows the symlink and
// truncates. Fixed: O_CREATE|O_EXCL|O_NOFOLLOW.
func TestStateDirNudgeSymlinkIsNotFollowed(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	slow := func(int) time.Duration { return time.Hour }
	startRunner(t, c, dir, runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute), Backoff: slow})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	session := c.session()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Planted while the runner is connected (it removes a nudge only
	// while it waits to reconnect, and at start).
	if err := os.Symlink(victim, filepath.Join(dir, "reconnect")); err != nil {
		t.Fatal(err)
	}
	second, err := runner.New(c.URL(), dir, &runner.Options{Lease: "lease-1", Ticket: c.resumeTicket(session), Backoff: fastBackoff, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := second.Run(ctx); !errors.Is(err, runner.ErrStateDirBusy) {
		t.Fatalf("a second runner on the state directory: %v, want ErrStateDirBusy", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the nudge's symlink target now holds %q, %v; want it untouched", b, err)
	}
}

// A task that writes the nudge file over and over while its runner is
// disconnected (the controller refuses it) gets one early reconnect, not
// one per nudge: the runner waits out its backoff after that. Found
// broken: every nudge ended the wait and reset the backoff (a reconnect
// every 50 ms for as long as the task kept writing). Fixed: one nudge per
// disconnection.
func TestNudgeSpamIsNoReconnectStorm(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	slow := func(int) time.Duration { return time.Hour }
	startRunner(t, c, dir, runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute), Backoff: slow})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	c.mu.Lock()
	c.refuse = true
	c.mu.Unlock()
	c.drop()
	time.Sleep(200 * time.Millisecond) // the runner is in its hour of backoff
	for range 20 {
		if err := os.WriteFile(filepath.Join(dir, "reconnect"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(75 * time.Millisecond)
	}
	c.mu.Lock()
	attempts := len(c.tokens)
	c.mu.Unlock()
	if attempts != 2 {
		t.Errorf("%d connect attempts after 20 nudges, want 2 (the first, one nudged)", attempts)
	}
}

// A host lease's release removes the lease directory, the runner's state
// directory with it. A runner that then cannot reach its controller stops
// (ErrStateDirGone) instead of reconnecting forever: found as a runner
// left on an unprivileged SSH account, retrying a socket that no longer
// existed. One whose directory is there keeps reconnecting.
func TestARunnerWhoseStateDirectoryIsGoneStops(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, done := startRunner(t, c, dir, runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	c.mu.Lock()
	c.refuse = true
	c.mu.Unlock()
	c.drop()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		c.mu.Lock()
		n := len(c.tokens)
		c.mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner never tried to reconnect")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the runner stopped with its state directory in place: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, runner.ErrStateDirGone) {
			t.Errorf("Run = %v, want ErrStateDirGone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the runner kept reconnecting after its state directory was removed")
	}
}
