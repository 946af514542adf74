package controller_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// gateProxy forwards TCP connections on loopback to a server; blackhole
// makes it stop forwarding (connections stay open, bytes are held, no FIN:
// a network that went silent), restore cuts what it held and forwards
// again.
type gateProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	cond  *sync.Cond
	held  bool
	conns []net.Conn
}

func newGateProxy(t *testing.T, to string) *gateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gateProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			wg.Go(func() { p.copy(up, c); up.Close(); c.Close() })
			wg.Go(func() { p.copy(c, up); up.Close(); c.Close() })
		}
	})
	t.Cleanup(func() { ln.Close(); p.restore(); wg.Wait() })
	return p
}

// copy forwards src to dst, holding every read while the gate is held.
func (p *gateProxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.held {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *gateProxy) blackhole() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// restore closes every connection (what was held is lost) and forwards
// again.
func (p *gateProxy) restore() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// taskState returns the state Tasks reports for task.
func taskState(t *testing.T, s *server, session, task string) controller.TaskStatus {
	t.Helper()
	ts, err := s.c.Tasks(context.Background(), operator, session)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range ts {
		if st.TaskID == task {
			return st
		}
	}
	t.Fatalf("Tasks has no task %s: %+v", task, ts)
	return controller.TaskStatus{}
}

// waitState waits (up to a generous limit, no timing asserted) until
// task reads want.
func waitState(t *testing.T, s *server, session, task string, want controller.TaskState) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st := taskState(t, s, session, task)
		if st.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s reads %s after a minute, want %s (%+v)", task, st.State, want, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Liveness: a running task whose runner's network goes silent reads
// unknown once the controller drops the connection for missed heartbeats,
// and running again when the runner reconnects.
func TestTasksReadUnknownWhileTheRunnerIsDisconnected(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{Options: controller.WithLimits(controller.Options{}, prpwire.Welcome{Heartbeat: 200 * time.Millisecond, DeadAfter: time.Second})})
	proxy := newGateProxy(t, s.srv.Listener.Addr().String())
	s.url = "http://" + proxy.ln.Addr().String() + "/prp/"
	session := startRunner(t, s, prp.ScopeTask)
	ctx := context.Background()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "quiet", Argv: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.c.StopAndVerify(context.Background(), operator, session, time.Second) })
	// A quiet task (no output, only heartbeats on the connection) runs.
	waitState(t, s, session, "quiet", controller.TaskRunning)
	if st := taskState(t, s, session, "quiet"); st.PID == 0 {
		t.Errorf("running task = %+v, want its pid", st)
	}

	proxy.blackhole()
	waitState(t, s, session, "quiet", controller.TaskUnknown)
	if s.c.Connected(session) {
		t.Error("a task reads unknown while the controller counts its runner connected")
	}

	proxy.restore()
	waitState(t, s, session, "quiet", controller.TaskRunning)

	// Stopped, the task exits and reads so, connected or not.
	if _, err := s.c.StopAndVerify(ctx, operator, session, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, session, "quiet", controller.TaskExited)
}

// PRP-5: a runner that comes back without events the controller never
// stored (its disk lost them) gets them recorded as events_lost{from,to}
// on its session; the command whose result was among them fails loudly
// (indeterminate, events_lost), and the session goes on past the gap.
func TestLostEventsAreRecordedAndFailTheSessionsTasks(t *testing.T) {
	t.Parallel()
	store := controller.NewMemoryStore()
	s := newServer(t, serverOptions{Options: controller.Options{Store: store}})
	state := t.TempDir()
	child := startChild(t, s, state, "")
	session := waitSession(t, s)
	ctx := context.Background()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "left", Argv: []string{"sh", "-c", "echo hi; exec sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// On a failure path the task's processes outlive its runners.
		for _, pid := range tagged("left") {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := s.c.Output(ctx, operator, session, "left", prp.Stdout)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) == "hi\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("output after a minute = %q, want %q", out, "hi\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()

	// The sandbox's disk loses the outbox: the runner's ack file says it
	// had 5 events past what the controller stored, and none is left.
	ack, err := store.LastEventSeq(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(state, "outbox-*"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no outbox segments in the runner's state directory (%v)", err)
	}
	for _, f := range segs {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "outbox.ack"), []byte(strconv.FormatUint(ack+5, 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	startChild(t, s, state, session)

	res := wait(t, s, session, "c1")
	if res.Status != prp.ResultIndeterminate || res.Code != prpwire.CodeEventsLost {
		t.Errorf("result of the task whose events were lost = %+v, want indeterminate, %s", res, prpwire.CodeEventsLost)
	}
	lost, err := s.c.EventsLost(ctx, operator, session)
	if err != nil {
		t.Fatal(err)
	}
	if want := (controller.LostRange{From: ack + 1, To: ack + 5}); len(lost) != 1 || lost[0] != want {
		t.Errorf("EventsLost = %+v, want [%+v]", lost, want)
	}
	if st := taskState(t, s, session, "left"); st.State != controller.TaskFailed {
		t.Errorf("task after events_lost = %+v, want failed", st)
	}
	// A follower reading the task's output through its handle is told of
	// the loss, after the chunks stored before it, never past it.
	att, err := s.c.Reattach(ctx, operator, session)
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	defer ocancel()
	for from := uint64(0); ; {
		chunks, err := att.Task("left", "c1").Output(octx, from)
		if errors.Is(err, controller.ErrEventsLost) {
			break
		}
		if err != nil {
			t.Fatalf("Output of the task whose events were lost, from %d: %v; want ErrEventsLost", from, err)
		}
		from = chunks[len(chunks)-1].Seq
	}
	// The session goes on past the gap: a new task runs and its output
	// is stored, and the only gap in the stored seqs is the lost range.
	if _, err := s.c.StartTask(ctx, operator, session, "c2", prp.TaskStart{TaskID: "after", Argv: []string{"echo", "after"}}); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, s, session, "c2"); res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result after the gap = %+v, want exit 0", res)
	}
	if out, err := s.c.Output(ctx, operator, session, "after", prp.Stdout); err != nil || string(out) != "after\n" {
		t.Errorf("output after the gap = %q, %v; want %q", out, err, "after\n")
	}
	evs, err := store.EventsAfter(ctx, session, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		switch {
		case e.Event.Kind == controller.EventEventsLost:
			if e.Seq != ack+5 || e.Event.Result == nil || e.Event.Result.Code != prpwire.CodeEventsLost {
				t.Errorf("events_lost record = %+v, want seq %d with code %s", e, ack+5, prpwire.CodeEventsLost)
			}
		case i > 0 && e.Seq != evs[i-1].Seq+1:
			t.Errorf("stored seq %d after %d without an events_lost record", e.Seq, evs[i-1].Seq)
		}
	}
	// The task the lost events left behind is still stopped and proven so.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := s.c.StopAndVerify(sctx, operator, session, time.Second); err != nil {
		t.Errorf("StopAndVerify after events_lost: %v", err)
	}
	if left := tagged("left"); len(left) != 0 {
		t.Errorf("processes of the task still alive after a verified stop: %v", left)
	}
}
