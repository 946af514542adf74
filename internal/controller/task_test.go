package controller_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// attachFake acquires a lease of the fake world for its runner and
// attaches it.
func attachFake(t *testing.T, w *leaseWorld) (*lease.Handle, *controller.Attachment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := w.acquire(t)
	t.Cleanup(func() { _, _ = h.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy}) })
	att, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return h, att
}

// issue 26: the task handle: Start, output to the spec's writers in order
// while Wait runs (a Wait cut short goes on where it stopped: nothing
// twice, nothing missed), Output from an event seq, the exit; starting
// the same task again runs nothing twice.
func TestTheTaskHandleStreamsWaitsAndReadsFromAnOffset(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	_, att := attachFake(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	marker := filepath.Join(t.TempDir(), "runs")
	var stdout, stderr lockedBuffer
	pids := make(chan int, 2)
	spec := controller.TaskSpec{
		TaskStart: prp.TaskStart{TaskID: "t-handle", Argv: []string{"sh", "-c",
			`echo run >> "$1"; printf 'out-1\n'; printf 'err-1' >&2; sleep 1; printf 'out-2\000\377'; exit 3`, "sh", marker}},
		Stdout: &stdout, Stderr: &stderr, Started: func(pid int) { pids <- pid },
	}
	task, err := att.Start(ctx, leaseOperator, spec)
	if err != nil {
		t.Fatal(err)
	}
	if task.ID() != "t-handle" || task.CommandID() != "start_t-handle" || task.Session() != att.Session() {
		t.Errorf("task %s command %s session %s", task.ID(), task.CommandID(), task.Session())
	}
	// A Wait cut short returns the context's error ...
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = task.Wait(short)
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a short Wait = %v, want DeadlineExceeded", err)
	}
	// ... and the next one goes on: each byte once, in order.
	exit, err := task.Wait(ctx)
	if err != nil || exit.Code != 3 {
		t.Fatalf("Wait = %+v, %v; want exit 3", exit, err)
	}
	if got := stdout.String(); got != "out-1\nout-2\x00\xff" {
		t.Errorf("stdout writer got %q", got)
	}
	if got := stderr.String(); got != "err-1" {
		t.Errorf("stderr writer got %q", got)
	}
	select {
	case pid := <-pids:
		if pid <= 0 {
			t.Errorf("Started(%d)", pid)
		}
	default:
		t.Error("Started was not called")
	}
	if len(pids) != 0 {
		t.Error("Started was called twice")
	}

	// Output reads every chunk by event seq; from a chunk's seq on, the
	// chunks after it, then io.EOF.
	var all []controller.OutputChunk
	for from := uint64(0); ; {
		cs, err := task.Output(ctx, from)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, cs...)
		from = cs[len(cs)-1].Seq
	}
	streams := map[prp.Stream]string{}
	for _, c := range all {
		streams[c.Stream] += string(c.Data)
	}
	if streams[prp.Stdout] != "out-1\nout-2\x00\xff" || streams[prp.Stderr] != "err-1" {
		t.Errorf("Output chunks = %q", streams)
	}
	if len(all) < 2 {
		t.Fatalf("%d chunks, want at least 2", len(all))
	}
	rest, err := task.Output(ctx, all[0].Seq)
	if err != nil || len(rest) != len(all)-1 || rest[0].Seq != all[1].Seq {
		t.Errorf("Output after the first chunk = %d chunks, %v; want the %d after it", len(rest), err, len(all)-1)
	}

	// The same task again: the journaled command, nothing runs twice.
	again, err := att.Start(ctx, leaseOperator, controller.TaskSpec{TaskStart: spec.TaskStart})
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := again.Wait(ctx); err != nil || exit.Code != 3 {
		t.Errorf("the second handle's Wait = %+v, %v", exit, err)
	}
	if b, _ := os.ReadFile(marker); string(b) != "run\n" {
		t.Errorf("the task ran %d times, want once", strings.Count(string(b), "run"))
	}
	// A handle found again by id (a host that restarted) reads the same.
	if exit, err := att.Task("t-handle", "").Wait(ctx); err != nil || exit.Code != 3 {
		t.Errorf("Task(id).Wait = %+v, %v", exit, err)
	}
}

// issue 26, PRP-6: Stop stops the task's tree and returns the runner's
// proof with its evidence kind, runner_attested; Stop again returns the
// same proof; Wait then reports the signal.
func TestStopReturnsTheRunnersProofWithItsEvidence(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	_, att := attachFake(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	killTagged(t, "t-stop")
	task, err := att.Start(ctx, leaseOperator, controller.TaskSpec{StopGrace: time.Second,
		TaskStart: prp.TaskStart{TaskID: "t-stop", Argv: []string{"sh", "-c", "sleep 300 & sleep 300; wait"}}})
	if err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, w.s, att.Session(), "t-stop", controller.TaskRunning)
	p, err := task.Stop(ctx)
	if err != nil {
		t.Fatalf("Stop: %v (%+v)", err, p)
	}
	if p.TaskID != "t-stop" || !p.Complete || len(p.Survivors) != 0 || p.Evidence != drivers.EvidenceRunnerAttested {
		t.Errorf("proof %+v, want t-stop's, complete, runner_attested", p)
	}
	if again, err := task.Stop(ctx); err != nil || again.TaskID != p.TaskID || again.Complete != p.Complete {
		t.Errorf("Stop again = %+v, %v; want the same proof", again, err)
	}
	exit, err := task.Wait(ctx)
	if err != nil || exit.Code >= 0 || exit.Signal == "" {
		t.Errorf("Wait after Stop = %+v, %v; want a signal", exit, err)
	}
	if left := tagged("t-stop"); len(left) > 0 {
		t.Errorf("processes of the stopped task left: %v", left)
	}
}

// issue 26: Attach installs the runner the lease records; a lease
// acquired without one is refused as unsupported and nothing is
// installed. Reattach and the handles act as their principal: a stranger
// gets the session's not found.
func TestAttachReadsTheRunnerFromTheLease(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plain, err := w.m.Acquire(ctx, leaseOperator, lease.AcquireRequest{Company: "co-1", EnvironmentID: "env-1", Run: "run-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if _, err := w.s.c.Attach(ctx, leaseOperator, plain, controller.AttachRequest{}); !errors.Is(err, drivers.ErrUnsupported) ||
		!strings.Contains(err.Error(), "AcquireRequest.Runner") {
		t.Errorf("Attach to a lease without a runner = %v, want unsupported naming AcquireRequest.Runner", err)
	}
	if n := len(w.s.c.ConnectedSessions()); n != 0 {
		t.Errorf("%d runners connected", n)
	}

	h, att := attachFake(t, w)
	if att.Hello().BinarySHA256 == "" || h.Lease().Runner == nil || h.Lease().Runner.SHA256 != fakeSpec.SHA256 {
		t.Errorf("hello %+v, lease runner %+v; want the lease's spec %s", att.Hello(), h.Lease().Runner, fakeSpec.SHA256)
	}
	_, err = w.s.c.Reattach(ctx, stranger, att.Session())
	wantHidden(t, "Reattach by a stranger", err, att.Session())
	re, err := w.s.c.Reattach(ctx, leaseOperator, att.Session())
	if err != nil || re.Session() != att.Session() || re.Lease() != h.ID() || re.Company() != "co-1" {
		t.Fatalf("Reattach = %+v, %v", re, err)
	}
	task, err := re.Start(ctx, leaseOperator, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(task.ID(), "task_") || task.CommandID() != "start_"+strings.TrimPrefix(task.ID(), "task_") {
		t.Errorf("generated ids: task %s command %s", task.ID(), task.CommandID())
	}
	if exit, err := task.Wait(ctx); err != nil || exit.Code != 0 {
		t.Errorf("Wait = %+v, %v", exit, err)
	}
	if _, err := re.Start(ctx, stranger, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"true"}}}); err == nil {
		t.Error("a stranger started a task on the handle")
	}
	evs, err := att.Events(ctx, 0, 0)
	if err != nil || len(evs) == 0 {
		t.Errorf("Events = %d, %v", len(evs), err)
	}
}

// issue 55: Wait reads back from the sink only the output it writes to a
// writer: a task started with a Stdout gets its bytes, and one started
// without Stdout and Stderr waits to its exit with the chunk files gone
// (it read none of them; a 1 GiB stream read back chunk by chunk halved
// the runner-stream bench).
func TestWaitWithoutWritersReadsNoOutputBack(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	w := newLeaseWorldWith(t, time.Minute, serverOptions{Options: controller.Options{DataDir: dataDir}})
	_, att := attachFake(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout lockedBuffer
	task, err := att.Start(ctx, leaseOperator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "t-loud", Argv: []string{"printf", "loud"}}, Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := task.Wait(ctx); err != nil || exit.Code != 0 || stdout.String() != "loud" {
		t.Fatalf("Wait = %+v, %v, stdout %q; want exit 0 and \"loud\"", exit, err, stdout.String())
	}
	// The quiet task prints, then waits for the chunk files to be removed.
	gate := filepath.Join(t.TempDir(), "gate")
	task, err = att.Start(ctx, leaseOperator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "t-quiet", Argv: []string{"sh", "-c",
		`head -c 100000 /dev/zero; while [ ! -e "$1" ]; do sleep 0.05; done; exit 4`, "sh", gate}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		u, err := w.s.c.OutputStatus(ctx, leaseOperator, att.Session(), "t-quiet")
		if err != nil {
			t.Fatal(err)
		}
		if u.Bytes == 100000 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stored %d bytes of 100000: %v", u.Bytes, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	chunks, err := filepath.Glob(filepath.Join(dataDir, "*", "*.chunk"))
	if err != nil || len(chunks) == 0 {
		t.Fatalf("chunk files: %v %v", chunks, err)
	}
	for _, c := range chunks {
		if err := os.Remove(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exit, err := task.Wait(ctx)
	if err != nil || exit.Code != 4 {
		t.Fatalf("Wait = %+v, %v; want exit 4 without reading the removed output", exit, err)
	}
}
