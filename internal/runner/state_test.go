package runner

import (
	"context"
	"github.com/berthdev/berth/internal/prpwire"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/internal/prp"
)

func outputEvent(n int) prp.Event {
	return prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Data: []byte(strings.Repeat("x", n))}}
}

// PRP-5: the outbox survives a reopen (a runner restart): acked events are
// gone, unacked ones are replayed from ack+1, and a torn last record (kill
// -9 mid-write) is cut off.
func TestOutboxSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := openOutbox(dir, 1<<20, testKey)
	if err != nil {
		t.Fatal(err)
	}
	o.segMax = 300 // several segments
	ctx := context.Background()
	for i := range 10 {
		if seq, err := o.Append(ctx, outputEvent(50+i)); err != nil || seq != uint64(i+1) {
			t.Fatalf("Append %d = %d, %v", i, seq, err)
		}
	}
	if err := o.Ack(4); err != nil {
		t.Fatal(err)
	}
	if err := o.Ack(11); err == nil {
		t.Error("an ack beyond the last event was accepted")
	}
	o.close()
	segs, _ := o.segments()
	last := segs[len(segs)-1]
	f, _ := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0, 0, 0, 0, 0, 0, 0, 11, 0, 0, 1}) // a torn record
	f.Close()

	o2, err := openOutbox(dir, 1<<20, testKey)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := o2.After(0)
	var seqs []uint64
	for _, r := range recs {
		seqs = append(seqs, r.seq)
	}
	if !slices.Equal(seqs, []uint64{5, 6, 7, 8, 9, 10}) {
		t.Errorf("after reopen the outbox replays %v, want 5..10", seqs)
	}
	if oldest, next, acked := o2.cursor(); oldest != 5 || next != 11 || acked != 4 {
		t.Errorf("cursor = %d, %d, %d; want 5, 11, 4", oldest, next, acked)
	}
	if seq, err := o2.Append(ctx, outputEvent(1)); err != nil || seq != 11 {
		t.Errorf("Append after reopen = %d, %v; want 11", seq, err)
	}
	if err := o2.Ack(11); err != nil {
		t.Fatal(err)
	}
	segs2, _ := o2.segments()
	if len(segs2) >= len(segs) {
		t.Errorf("acked segments were not removed: %d before, %d after", len(segs), len(segs2))
	}
	o2.close()
}

// PRP-5: a full outbox blocks Append until an ack frees space (the task's
// pipe is then not read); nothing is dropped.
func TestOutboxBackpressure(t *testing.T) {
	t.Parallel()
	// Output events are binary records: header, task id, data.
	small, big := make([]byte, outHeader+len("t1")+200), make([]byte, outHeader+len("t1")+400)
	limit := int64(3*len(small) + 10) // three small events fit, a big one does not
	o, err := openOutbox(t.TempDir(), limit, testKey)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	ctx := context.Background()
	for range 3 {
		if _, err := o.Append(ctx, outputEvent(200)); err != nil {
			t.Fatal(err)
		}
	}
	var acked atomic.Bool
	done := make(chan uint64)
	go func() {
		seq, err := o.Append(ctx, outputEvent(400))
		if err != nil {
			t.Error(err)
		}
		if !acked.Load() {
			t.Error("Append into a full outbox returned before an ack freed space")
		}
		done <- seq
	}()
	acked.Store(true)
	if err := o.Ack(2); err != nil {
		t.Fatal(err)
	}
	if seq := <-done; seq != 4 {
		t.Errorf("the blocked event got seq %d, want 4", seq)
	}
	if n := o.unacked(); n > limit || n != int64(len(small)+len(big)) {
		t.Errorf("unacked bytes %d, want %d within the bound %d", n, len(small)+len(big), limit)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := o.Append(cctx, outputEvent(400)); err != context.Canceled {
		t.Errorf("Append into a full outbox with a cancelled context = %v, want context.Canceled", err)
	}
}

// PRP-4: a command journaled executing is indeterminate after a reopen
// (runner restart); done commands keep their results; a torn line is cut.
func TestJournalRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, _, err := openJournal(dir, testKey)
	if err != nil {
		t.Fatal(err)
	}
	res := &prp.Result{CommandID: "c1", Status: prp.ResultDone, Exit: &prp.Exit{Code: 0}}
	for _, e := range []journalEntry{
		{Seq: 1, ID: "c1", Digest: "d1", Kind: prp.CommandTaskStart, TaskID: "t1", State: prp.JournalReceived},
		{ID: "c1", State: prp.JournalExecuting, PGID: 42},
		{ID: "c1", State: prp.JournalDone, Result: res},
		{Seq: 2, ID: "c2", Digest: "d2", Kind: prp.CommandTaskStart, TaskID: "t2", State: prp.JournalReceived},
		{ID: "c2", State: prp.JournalExecuting, PGID: 43},
		{Seq: 3, ID: "c3", Digest: "d3", Kind: prp.CommandTaskStart, TaskID: "t3", State: prp.JournalReceived},
		{Seq: 4, ID: "c4", Digest: "d4", Kind: prp.CommandTaskStart, TaskID: "t4", State: prp.JournalReceived, Secrets: true},
	} {
		if err := j.record(e); err != nil {
			t.Fatal(err)
		}
	}
	j.f.Write([]byte(`{"seq":5,"id":"c5"`)) // torn
	j.close()

	j2, interrupted, err := openJournal(dir, testKey)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.close()
	slices.SortFunc(interrupted, func(a, b journalEntry) int { return strings.Compare(a.ID, b.ID) })
	if len(interrupted) != 3 || interrupted[0].ID != "c2" || interrupted[0].PGID != 43 || interrupted[0].TaskID != "t2" ||
		interrupted[0].Result.Status != prp.ResultIndeterminate {
		t.Fatalf("interrupted = %+v, want c2 indeterminate with its pgid, c3 and c4", interrupted)
	}
	// A task.start received and never started is answered: nothing ran
	// (the resume cursor keeps it from being sent again).
	if c3 := interrupted[1]; c3.ID != "c3" || c3.State != prp.JournalDone || c3.Result.Status != prp.ResultRejected || c3.Result.Code != prpwire.CodeInterrupted {
		t.Errorf("c3 = %+v (result %+v), want done, rejected %s", c3, c3.Result, prpwire.CodeInterrupted)
	}
	// A task.start with secrets whose values died with the runner never
	// runs: refused secrets_missing (its values are not redelivered).
	if c4 := interrupted[2]; c4.ID != "c4" || c4.State != prp.JournalDone || c4.Result.Status != prp.ResultRejected || c4.Result.Code != prpwire.CodeSecretsMissing {
		t.Errorf("c4 = %+v (result %+v), want done, rejected %s", c4, c4.Result, prpwire.CodeSecretsMissing)
	}
	if j2.last() != 4 {
		t.Errorf("last seq = %d, want 4 (the torn line dropped)", j2.last())
	}
	if e, _ := j2.lookup("c1"); e.State != prp.JournalDone || e.Result.Exit == nil || e.Digest != "d1" {
		t.Errorf("c1 = %+v, want done with its result and digest", e)
	}
	j2.close()
	j3, again, err := openJournal(dir, testKey)
	if err != nil {
		t.Fatal(err)
	}
	defer j3.close()
	if e, _ := j3.lookup("c2"); len(again) != 0 || e.State != prp.JournalIndeterminate {
		t.Errorf("after a second reopen: interrupted %v, c2 %+v; want none and indeterminate", again, e)
	}
}

// PRP-6: a check that cannot run makes the proof incomplete, never
// assumed: without a known process group the proof says so.
func TestProofIncompleteWhenACheckCannotRun(t *testing.T) {
	t.Parallel()
	// Processes older than this test cannot carry a tag it made up.
	since := startTicks(os.Getpid())
	p := verifyStopped("t1", 0, since, TagEnv+"=nobody:t1")
	if p.Complete || len(p.Failed) == 0 || !strings.HasPrefix(p.Failed[0], prp.MethodGroup) || slices.Contains(p.Methods, prp.MethodGroup) {
		t.Errorf("proof without a process group = %+v, want incomplete naming %s", p, prp.MethodGroup)
	}
	if !slices.Contains(p.Methods, prp.MethodProcTag) {
		t.Errorf("the tag scan did not run: %+v", p)
	}
	// A group that still has a live member is a survivor.
	self := os.Getpid()
	pg := verifyStopped("t1", syscallGetpgid(t), since, TagEnv+"=nobody:t1")
	if pg.Complete || len(pg.Survivors) == 0 {
		t.Errorf("proof for this test's own live group = %+v, want survivors (pid %d's group)", pg, self)
	}

}

func syscallGetpgid(t *testing.T) int {
	t.Helper()
	pgid, err := unixGetpgid()
	if err != nil {
		t.Fatal(err)
	}
	return pgid
}

// PRP-5: an outbox holds output events as binary records and every other
// event as JSON; both come back whole after a reopen, invalid UTF-8
// included.
func TestOutboxRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := openOutbox(dir, 1<<20, testKey)
	if err != nil {
		t.Fatal(err)
	}
	evs := []prp.Event{
		{Kind: prp.EventStarted, TaskID: "t1", PID: 42},
		{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Offset: 0, Data: []byte{0xff, 0, 'a'}}},
		{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stderr, Offset: 1 << 35, Data: []byte("err\n")}},
		{Kind: prp.EventExit, TaskID: "t1", Exit: &prp.Exit{Code: 3}},
	}
	for _, ev := range evs {
		if _, err := o.Append(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	o.close()
	o2, err := openOutbox(dir, 1<<20, testKey)
	if err != nil {
		t.Fatal(err)
	}
	defer o2.close()
	recs, _ := o2.After(0)
	if len(recs) != len(evs) {
		t.Fatalf("%d records after reopen, want %d", len(recs), len(evs))
	}
	for i, r := range recs {
		if _, _, isOutput, _ := r.output(); isOutput != (evs[i].Kind == prp.EventOutput) {
			t.Errorf("record %d: binary %v, want binary only for output", r.seq, isOutput)
		}
		got, err := r.event()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(evs[i], got); diff != "" {
			t.Errorf("record %d (-want +got):\n%s", r.seq, diff)
		}
	}
}
