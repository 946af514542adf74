package runner_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/runner"
)

func sequence(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// PRP-5: connections cut while events are unacknowledged: the runner
// replays from the controller's ack+1 on every reconnect; the output is
// byte-identical, no event lost or duplicated.
func TestResumeAfterReconnect(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.limits.MaxOutputChunk = 4096
	startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.command(startCmd("c1", "t1", "seq", "1", "200000"))
	// A cut made before the task's result arrived leaves events unacked,
	// so the runner must connect again; one made after it (a loaded
	// machine lets the task finish early) need not.
	midTask := 0
	for _, at := range []uint64{10, 60, 150} {
		c.mu.Lock()
		c.holdAcks = true
		c.mu.Unlock()
		c.waitFor("events to cut at", func() bool { return c.received >= at || len(c.resultsLocked("c1")) > 0 })
		c.mu.Lock()
		if len(c.resultsLocked("c1")) == 0 {
			midTask++
		}
		c.mu.Unlock()
		c.drop()
		c.mu.Lock()
		c.holdAcks = false
		c.mu.Unlock()
	}
	res := c.waitResults("c1", 1)[0]
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result = %+v", res)
	}
	if got, want := c.output("t1", prp.Stdout), sequence(200000); !bytes.Equal(got, want) {
		t.Errorf("stdout differs: %d bytes, want %d", len(got), len(want))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if midTask == 0 {
		t.Fatalf("the task ended before the first cut: nothing was resumed")
	}
	if c.conns < 1+midTask {
		t.Errorf("%d connections, want at least %d (%d cuts while the task ran)", c.conns, 1+midTask, midTask)
	}
	for i, h := range c.hellos[1:] {
		if h.Resume.LastCommandSeq != 1 || h.Resume.NextEventSeq < 2 {
			t.Errorf("hello %d resume cursor = %+v", i+1, h.Resume)
		}
	}
}

// PRP-5: with acks withheld the runner stops reading the task's pipes once
// its outbox holds max_unacked_bytes: the task cannot finish, nothing is
// dropped, and everything arrives once acks flow again.
func TestBackpressureEndToEnd(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.limits.MaxFrame, c.limits.MaxOutputChunk, c.limits.MaxUnackedBytes = prpwire.MinMaxFrame, 4096, 64<<10
	c.holdAcks = true
	dir := t.TempDir()
	marker := filepath.Join(dir, "finished")
	startRunner(t, c, filepath.Join(dir, "state"), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	// 4 MiB: more than the task's pipe (grown to 1 MiB) and the outbox hold.
	c.command(startCmd("c1", "t1", "sh", "-c", "head -c 4194304 /dev/zero | tr '\\0' a; touch "+marker))
	// Wait until the outbox is full: the next 4 KiB chunk would not fit.
	c.waitFor("a full outbox", func() bool { return c.maxUnack > 64<<10-8<<10 })
	if _, err := os.Stat(marker); err == nil {
		t.Error("the task finished writing 4 MiB although only 64 KiB could be unacknowledged")
	}
	c.releaseAcks()
	res := c.waitResults("c1", 1)[0]
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result = %+v", res)
	}
	if got := c.output("t1", prp.Stdout); !bytes.Equal(got, bytes.Repeat([]byte("a"), 4<<20)) {
		t.Errorf("stdout: %d bytes, want 4 MiB of a", len(got))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxUnack > 64<<10 {
		t.Errorf("the runner had %d bytes unacknowledged, over the welcome's 64 KiB", c.maxUnack)
	}
}

// Liveness: after the orphan grace without a controller the runner stops
// its tasks itself and delivers the proofs on the next connection.
func TestOrphanGraceStopsTasks(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.limits.OrphanGrace = 200 * time.Millisecond
	r, _ := startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.command(startCmd("c1", "t1", "sleep", "300"))
	c.waitFor("t1 started", func() bool { return hasStarted(c.events, "t1") })
	c.mu.Lock()
	c.refuse = true
	c.mu.Unlock()
	c.drop()
	for deadline := time.Now().Add(time.Minute); len(tagged(r.Tag("t1"))) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runner did not stop its task after the orphan grace")
		}
	}
	c.mu.Lock()
	c.refuse = false
	c.mu.Unlock()
	res := c.waitResults("c1", 1)[0]
	if res.Exit == nil || res.Exit.Signal == "" {
		t.Errorf("result = %+v, want an exit by signal", res)
	}
	c.waitFor("the proof", func() bool {
		for _, e := range c.events {
			if e.Kind == prp.EventProof {
				return true
			}
		}
		return false
	})
	proofs := c.eventsOf(prp.EventProof, "t1")
	if len(proofs) != 1 || !proofs[0].Proof.Complete {
		t.Errorf("proofs = %+v, want one complete proof", proofs)
	}
}

// PRP-4: a command past the next seq closes the connection with
// CloseSequenceGap; the session resumes on the next connection.
func TestSequenceGapClosesAndResumes(t *testing.T) {
	t.Parallel()
	c := newController(t)
	startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	body, _ := json.Marshal(prpwire.SealCommand(prp.Command{ID: "gap", Kind: prp.CommandTaskStart, Lease: "lease-1", Run: "run-1",
		TaskStart: &prp.TaskStart{TaskID: "tg", Argv: []string{"true"}}}))
	c.sendRaw(prpwire.Envelope{Protocol: prpwire.Protocol, Version: 1, Type: prpwire.TypeCommand, ID: "m-gap", Seq: 5, Body: body})
	c.waitFor("a close for the gap", func() bool { return slices.Contains(c.closes, prpwire.CloseSequenceGap) })
	c.command(startCmd("c1", "t1", "true"))
	if res := c.waitResults("c1", 1)[0]; res.Status != prp.ResultDone {
		t.Errorf("after the gap: %+v", res)
	}
	if len(c.resultsLocked("gap")) != 0 {
		t.Error("the command past the gap was run")
	}
}

// PRP-1: a frame over the welcome's max frame closes the connection with
// 1009 (SetReadLimit); the runner reconnects.
func TestFrameOverLimitCloses(t *testing.T) {
	t.Parallel()
	c := newController(t)
	c.limits.MaxFrame, c.limits.MaxOutputChunk = prpwire.MinMaxFrame, 4096
	startRunner(t, c, t.TempDir(), runner.Options{Ticket: c.ticket("lease-1", prp.ScopeTask, time.Minute)})
	c.waitFor("the welcome", func() bool { return c.conns == 1 })
	body, _ := json.Marshal(prpwire.TokenRenewal{Token: strings.Repeat("x", prpwire.MinMaxFrame), ExpiresAt: time.Now()})
	c.sendRaw(prpwire.Envelope{Protocol: prpwire.Protocol, Version: 1, Type: prpwire.TypeToken, ID: "m-big", Body: body})
	c.waitFor("a close for the big frame", func() bool { return slices.Contains(c.closes, websocket.StatusMessageTooBig) })
	c.waitFor("a reconnect", func() bool { return c.conns >= 2 })
}
