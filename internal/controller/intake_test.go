package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// hostileOutput sends n bytes of output of task on stdout from seq on, in
// 32 KiB chunks, and returns the next seq.
func (rr *hostileRunner) output(seq uint64, task string, stream prp.Stream, n int) uint64 {
	var off int64
	for n > 0 {
		k := min(n, 32<<10)
		rr.event(seq, prp.Event{Kind: prp.EventOutput, TaskID: task, Output: &prp.Output{Stream: stream, Offset: off, Data: bytes.Repeat([]byte{'x'}, k)}})
		seq, off, n = seq+1, off+int64(k), n-k
	}
	return seq
}

// storedEvents returns the kinds of the stored events of session.
func storedEvents(t *testing.T, s *server, session string) []prp.EventKind {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var kinds []prp.EventKind
	_ = s.c.Follow(ctx, operator, session, 0, func(e controller.StoredEvent) error {
		kinds = append(kinds, e.Event.Kind)
		return nil
	})
	return kinds
}

// Issue 22 item 4, against a hostile runner speaking the protocol: a task
// with output_limit 16 has 16 bytes stored of 257 KiB and its output marked
// truncated (chunk, exit, result, OutputStatus), and is not stopped; the
// output of a task never started in the session and every event of a
// probe session are acked and discarded.
func TestOutputIntakeIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("output limit", func(t *testing.T) {
		t.Parallel()
		// A heartbeat that outlasts a slow intake of the flood (-race).
		s := newServer(t, serverOptions{Options: controller.WithLimits(controller.Options{}, prpwire.Welcome{Heartbeat: 10 * time.Second})})
		_, token := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
		rr := connectRaw(t, s, token, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{})
		if _, err := s.c.StartTask(ctx, operator, rr.session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"yes"}, OutputLimit: 16}); err != nil {
			t.Fatal(err)
		}
		rr.until(prpwire.TypeCommand, nil)
		rr.event(1, prp.Event{Kind: prp.EventStarted, TaskID: "t1", PID: 4242})
		seq := rr.output(2, "t1", prp.Stdout, 256<<10)
		seq = rr.output(seq, "t1", prp.Stderr, 1<<10)
		// Output of a task the session never started.
		seq = rr.output(seq, "ghost", prp.Stdout, 256<<10)
		rr.event(seq, prp.Event{Kind: prp.EventExit, TaskID: "t1", Exit: &prp.Exit{Code: 0}})
		rr.event(seq+1, prp.Event{Kind: prp.EventResult, Result: &prp.Result{CommandID: "c1", Status: prp.ResultDone, Exit: &prp.Exit{Code: 0}}})
		rr.acked(seq + 1)
		res := wait(t, s, rr.session, "c1")
		if res.Exit == nil || !res.Exit.Truncated {
			t.Errorf("result exit = %+v, want truncated", res.Exit)
		}
		out, err := s.c.Output(ctx, operator, rr.session, "t1", prp.Stdout)
		if err != nil || len(out) != 16 {
			t.Errorf("stored stdout of t1 = %d bytes (%v), want 16", len(out), err)
		}
		if out, err := s.c.Output(ctx, operator, rr.session, "t1", prp.Stderr); err != nil || len(out) != 0 {
			t.Errorf("stored stderr of t1 = %d bytes (%v), want none past the limit", len(out), err)
		}
		if out, err := s.c.Output(ctx, operator, rr.session, "ghost", prp.Stdout); err != nil || len(out) != 0 {
			t.Errorf("stored output of a task never started = %d bytes (%v), want none", len(out), err)
		}
		u, err := s.c.OutputStatus(ctx, operator, rr.session, "t1")
		if err != nil || u.Bytes != 16 || u.Truncated != 256<<10+1<<10-16 {
			t.Errorf("OutputStatus(t1) = %+v, %v; want 16 bytes and the rest truncated", u, err)
		}
		var chunkCut, exitCut bool
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_ = s.c.Follow(cctx, operator, rr.session, 0, func(e controller.StoredEvent) error {
			if e.Event.TaskID == "ghost" {
				t.Errorf("event %d of the task never started was stored", e.Seq)
			}
			if e.Event.Output != nil && e.Event.Output.Truncated > 0 {
				chunkCut = true
			}
			if e.Event.Exit != nil && e.Event.Exit.Truncated {
				exitCut = true
			}
			return nil
		})
		if !chunkCut || !exitCut {
			t.Errorf("events mark the cut: chunk %v exit %v, want both", chunkCut, exitCut)
		}
		if r, err := s.c.Dispatch(ctx, operator, rr.session, prp.Command{ID: "c1", Kind: prp.CommandTaskStart, Lease: "lease-1", Run: "run-1", TaskStart: &prp.TaskStart{TaskID: "t1", Argv: []string{"yes"}, OutputLimit: 16}}); err != nil || r.Seq != 1 {
			t.Errorf("journal after the cut: c1 at %d (%v), want the one command (the task is not stopped)", r.Seq, err)
		}
	})
	t.Run("probe session", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, serverOptions{})
		_, token := exchangeToken(t, s, s.ticket(t, prp.ScopeProbe))
		rr := connectRaw(t, s, token, nil, prpwire.Resume{})
		rr.event(1, prp.Event{Kind: prp.EventStarted, TaskID: "t1", PID: 4242})
		rr.output(2, "t1", prp.Stdout, 1<<10)
		rr.acked(2)
		if kinds := storedEvents(t, s, rr.session); len(kinds) != 0 {
			t.Errorf("a probe session's events were stored: %v", kinds)
		}
		if u, err := s.c.OutputStatus(ctx, operator, rr.session, ""); err != nil || u.Discarded != 2 || u.Events != 0 {
			t.Errorf("OutputStatus of the probe session = %+v, %v; want 2 discarded, none stored", u, err)
		}
	})
}

// Issue 22 item 4: the session caps (bytes and events) hold across a
// reconnect to another controller on the same store (a replica): the
// counters are stored; a result a command waits for is stored past the
// event cap.
func TestSessionOutputCapsHoldAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := controller.NewMemoryStore()
	signer := testSigner(t)
	o := serverOptions{Signer: signer, Options: controller.Options{Store: store, DataDir: t.TempDir(), MaxSessionOutput: 100, MaxSessionEvents: 6}}
	a := newServer(t, o)
	_, token := exchangeToken(t, a, a.ticket(t, prp.ScopeTask))
	rr := connectRaw(t, a, token, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{})
	session := rr.session
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := a.c.StartTask(ctx, operator, session, "c-"+id, prp.TaskStart{TaskID: id, Argv: []string{"yes"}}); err != nil {
			t.Fatal(err)
		}
	}
	rr.output(1, "t1", prp.Stdout, 80) // seq 1
	rr.output(2, "t2", prp.Stdout, 80) // seq 2: 20 kept
	rr.acked(2)
	rr.close(a)

	b := newServer(t, o)
	rr = connectRaw(t, b, token, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{})
	if rr.welcome.EventAck != 2 {
		t.Fatalf("replica b acks %d, want 2", rr.welcome.EventAck)
	}
	rr.output(3, "t3", prp.Stdout, 50) // past the byte cap: nothing kept
	for seq := uint64(4); seq < 10; seq++ {
		rr.event(seq, prp.Event{Kind: prp.EventStarted, TaskID: "t3", PID: 4242})
	}
	rr.event(10, prp.Event{Kind: prp.EventResult, Result: &prp.Result{CommandID: "c-t1", Status: prp.ResultDone, Exit: &prp.Exit{}}})
	rr.acked(10)
	for task, want := range map[string]int{"t1": 80, "t2": 20, "t3": 0} {
		if out, err := b.c.Output(ctx, operator, session, task, prp.Stdout); err != nil || len(out) != want {
			t.Errorf("stored output of %s = %d bytes (%v), want %d", task, len(out), err, want)
		}
	}
	u, err := b.c.OutputStatus(ctx, operator, session, "")
	if err != nil || u.Bytes != 100 || u.Truncated != 60+50 || u.Events != 7 {
		t.Errorf("session usage = %+v, %v; want 100 bytes, 110 truncated, 6 events and the awaited result", u, err)
	}
	if res := wait(t, b, session, "c-t1"); res.Status != prp.ResultDone {
		t.Errorf("c-t1 = %+v, want the result stored past the event cap", res)
	}
	if kinds := storedEvents(t, b, session); len(kinds) != 7 {
		t.Errorf("stored events = %v, want 7", kinds)
	}
}

// Issue 22 item 4 with the real runner: output_limit 16 stores 16 bytes
// and the result says truncated; the session's byte cap, which the runner
// does not know, cuts a second task's output and marks its exit, and the
// task still runs to its end (it is not stopped).
func TestRealRunnerOutputIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newServer(t, serverOptions{Options: controller.Options{MaxSessionOutput: 1000}})
	session := startRunner(t, s, prp.ScopeTask)
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"sh", "-c", "head -c 100000 /dev/zero"}, OutputLimit: 16}); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, s, session, "c1"); res.Exit == nil || !res.Exit.Truncated {
		t.Errorf("c1 exit = %+v, want truncated", res.Exit)
	}
	if out, err := s.c.Output(ctx, operator, session, "t1", prp.Stdout); err != nil || len(out) != 16 {
		t.Errorf("stored output of t1 = %d bytes (%v), want 16", len(out), err)
	}
	if _, err := s.c.StartTask(ctx, operator, session, "c2", prp.TaskStart{TaskID: "t2", Argv: []string{"sh", "-c", "head -c 5000 /dev/zero; exit 3"}}); err != nil {
		t.Fatal(err)
	}
	res := wait(t, s, session, "c2")
	if res.Exit == nil || !res.Exit.Truncated || res.Exit.Code != 3 {
		t.Errorf("c2 exit = %+v, want code 3 (ran to its end) and truncated", res.Exit)
	}
	out, err := s.c.Output(ctx, operator, session, "t2", prp.Stdout)
	if err != nil || len(out) != 1000-16 {
		t.Errorf("stored output of t2 = %d bytes (%v), want %d (the session's cap)", len(out), err, 1000-16)
	}
	if u, err := s.c.OutputStatus(ctx, operator, session, ""); err != nil || u.Bytes != 1000 {
		t.Errorf("session usage = %+v, %v; want 1000 bytes stored", u, err)
	}
	// Reads from an offset, bounded.
	if b, err := s.c.OutputFrom(ctx, operator, session, "t2", prp.Stdout, 900, 50); err != nil || len(b) != 50 {
		t.Errorf("OutputFrom(900, 50) = %d bytes (%v), want 50", len(b), err)
	}
	if b, err := s.c.OutputFrom(ctx, operator, session, "t2", prp.Stdout, 950, 100); err != nil || len(b) != 1000-16-950 {
		t.Errorf("OutputFrom(950, 100) = %d bytes (%v), want %d", len(b), err, 1000-16-950)
	}
}

// journalReads counts the intake's reads of the command journal (the
// calls with JournalReadBatch as their limit; the writer reads 64 at a
// time).
type journalReads struct {
	controller.Store
	n atomic.Int64
}

func (s *journalReads) CommandsAfter(ctx context.Context, session string, after uint64, limit int) ([]controller.CommandRecord, error) {
	if limit == controller.JournalReadBatch {
		s.n.Add(1)
	}
	return s.Store.CommandsAfter(ctx, session, after, limit)
}

// A hostile runner's events of tasks it was never sent cost the store
// nothing: the intake reads the journal for an unknown task only when a
// command was sent since its last read (CONVENTIONS 25: nothing the
// sandbox sends may make the host work per frame).
func TestEventsOfMadeUpTasksReadNoJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &journalReads{Store: controller.NewMemoryStore()}
	s := newServer(t, serverOptions{Options: controller.Options{Store: st}})
	_, token := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
	rr := connectRaw(t, s, token, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{})
	if _, err := s.c.StartTask(ctx, operator, rr.session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	rr.until(prpwire.TypeCommand, nil)
	rr.event(1, prp.Event{Kind: prp.EventStarted, TaskID: "t1", PID: 4242})
	rr.acked(1)
	before := st.n.Load()
	const flood = 200
	for i := range flood {
		rr.event(uint64(2+i), prp.Event{Kind: prp.EventStarted, TaskID: fmt.Sprintf("made-up-%d", i), PID: 1})
	}
	rr.acked(1 + flood)
	if n := st.n.Load() - before; n != 0 {
		t.Errorf("%d events of made-up tasks made %d journal reads, want none (no command was sent since)", flood, n)
	}
	// A task started afterwards is found: its command was sent.
	if _, err := s.c.StartTask(ctx, operator, rr.session, "c2", prp.TaskStart{TaskID: "t2", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	rr.until(prpwire.TypeCommand, nil)
	seq := rr.output(2+flood, "t2", prp.Stdout, 3)
	rr.acked(seq - 1)
	if out, err := s.c.Output(ctx, operator, rr.session, "t2", prp.Stdout); err != nil || string(out) != "xxx" {
		t.Errorf("output of the task sent after the flood = %q, %v; want xxx", out, err)
	}
}
