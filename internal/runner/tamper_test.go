package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/berthdev/berth/internal/prpwire"

	"github.com/berthdev/berth/internal/prp"
)

// Issue 22 item 2: a journal line a task changed, forged or whose
// predecessor it removed fails its check under the state key: the command
// it names is indeterminate (journal_unauthenticated) and never run again,
// its seq still counts for the resume cursor, and the authentic lines
// stand. A journal read with another key trusts nothing.
func TestJournalRecordsAreAuthenticated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, _, err := openJournal(dir, testKey)
	if err != nil {
		t.Fatal(err)
	}
	done := &prp.Result{CommandID: "c1", Status: prp.ResultDone, Exit: &prp.Exit{Code: 0}}
	for _, e := range []journalEntry{
		{Seq: 1, ID: "c1", Digest: "d1", Kind: prp.CommandTaskStart, TaskID: "t1", State: prp.JournalReceived},
		{ID: "c1", State: prp.JournalDone, Result: done},
		{Seq: 2, ID: "c2", Digest: "d2", Kind: prp.CommandTaskStart, TaskID: "t2", State: prp.JournalReceived},
		{ID: "c2", State: prp.JournalDone, Result: &prp.Result{CommandID: "c2", Status: prp.ResultDone, Exit: &prp.Exit{Code: 0}}},
	} {
		if err := j.record(e); err != nil {
			t.Fatal(err)
		}
	}
	j.close()
	path := filepath.Join(dir, journalFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	// c2's lines: its start is rewritten (another digest), so that a
	// replayed command would look new; and a forged line claims c3 done.
	lines[2] = bytes.Replace(lines[2], []byte(`"d2"`), []byte(`"dX"`), 1)
	forged := []byte(`AAAA {"seq":3,"id":"c3","kind":"task.start","task_id":"t3","state":"done","at":"2026-01-01T00:00:00Z"}` + "\n")
	tampered := append(slices.Concat(lines...), forged...)
	if err := os.WriteFile(path, tampered, 0o600); err != nil {
		t.Fatal(err)
	}

	j2, interrupted, err := openJournal(dir, testKey)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.close()
	codes := map[string]string{}
	for _, e := range interrupted {
		codes[e.ID] = e.Result.Code
		if e.Result.Status != prp.ResultIndeterminate {
			t.Errorf("%s: %+v, want indeterminate", e.ID, e.Result)
		}
	}
	// c2's rewritten start and the line after it (its predecessor's mac
	// changed) fail; the forged c3 fails.
	if codes["c2"] != prpwire.CodeJournalUnauthenticated || codes["c3"] != prpwire.CodeJournalUnauthenticated || len(codes) != 2 {
		t.Errorf("interrupted = %v, want c2 and c3 %s", codes, prpwire.CodeJournalUnauthenticated)
	}
	if e, _ := j2.lookup("c1"); e.State != prp.JournalDone || e.Digest != "d1" {
		t.Errorf("c1 = %+v, want its authentic done state", e)
	}
	if e, _ := j2.lookup("c2"); e.State != prp.JournalIndeterminate {
		t.Errorf("c2 = %+v, want indeterminate", e)
	}
	if j2.last() != 3 {
		t.Errorf("last seq = %d, want 3 (unauthenticated seqs still count: their commands are not sent again)", j2.last())
	}
	j2.close()

	// Another key: nothing is authentic, every command is indeterminate.
	j3, again, err := openJournal(dir, bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	defer j3.close()
	if e, _ := j3.lookup("c1"); e.State != prp.JournalIndeterminate || len(again) != 3 {
		t.Errorf("with another key: c1 %+v, %d interrupted; want c1 indeterminate, 3", e, len(again))
	}
}

// Issue 22 item 2: an outbox record a task changed fails its check: it and
// the records before it are never sent (the resume cursor then shows the
// controller what was lost: events_lost), the records after it are.
func TestOutboxRecordsAreAuthenticated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := openOutbox(dir, 1<<20, testKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		if _, err := o.Append(ctx, prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Offset: int64(i), Data: []byte{'a' + byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	o.close()
	segs, _ := o.segments()
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("t1c")) // the task id and data of event 3
	b[i+2] = 'X'
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	o2, err := openOutbox(dir, 1<<20, testKey)
	if err != nil {
		t.Fatal(err)
	}
	defer o2.close()
	recs, _ := o2.After(0)
	var seqs []uint64
	for _, r := range recs {
		seqs = append(seqs, r.seq)
	}
	if !slices.Equal(seqs, []uint64{4, 5}) {
		t.Errorf("after the tamper the outbox replays %v, want 4, 5", seqs)
	}
	if oldest, next, _ := o2.cursor(); oldest != 4 || next != 6 {
		t.Errorf("cursor = %d, %d; want oldest 4 (1..3 lost), next 6", oldest, next)
	}
}

// Issue 22 item 2: a resume ticket is used only on the state directory
// that holds its session's journal: on another (a fresh one, whose runner
// would run the session's commands again) the runner refuses to start.
func TestResumeNeedsTheSessionsStateDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := bytes.Repeat([]byte{3}, 32)
	r := &Runner{dir: dir}
	if err := r.claimStateDir(credentials{Session: "s_1", StateKey: key}); err != nil {
		t.Fatal(err)
	}
	if err := r.claimStateDir(credentials{Session: "s_1", StateKey: key, Resume: true}); err != nil {
		t.Errorf("resume on the session's own state directory: %v", err)
	}
	if err := r.claimStateDir(credentials{Session: "s_1", StateKey: bytes.Repeat([]byte{4}, 32), Resume: true}); err == nil {
		t.Error("resume with another state key accepted the state directory")
	}
	fresh := &Runner{dir: t.TempDir()}
	if err := fresh.claimStateDir(credentials{Session: "s_1", StateKey: key, Resume: true}); err == nil {
		t.Error("resume on a fresh state directory accepted")
	}
	if err := os.WriteFile(filepath.Join(fresh.dir, sessionFile), []byte("s_1 forged\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fresh.claimStateDir(credentials{Session: "s_1", StateKey: key, Resume: true}); err == nil {
		t.Error("resume on a state directory with a forged session file accepted")
	}
}
