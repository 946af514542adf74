package runner

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The ack is written in place (issue 55): each Ack replaces the last one
// whole, whatever its digits, a reopen reads the last one, and an ack file
// an older runner wrote (the seq alone) is read as before. Segments are
// trimmed as acks pass them, and no other file is left in the directory.
func TestOutboxAckWrittenInPlace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// An older runner's ack file: "3", no padding, no newline.
	if err := os.WriteFile(filepath.Join(dir, ackFile), []byte("3"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := openOutbox(dir, 1<<20, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, acked := o.cursor(); acked != 3 {
		t.Fatalf("acked = %d after an older runner's ack file, want 3", acked)
	}
	o.segMax = 300 // several segments
	ctx := context.Background()
	for i := range 120 {
		if seq, err := o.Append(ctx, outputEvent(50)); err != nil || seq != uint64(i+4) {
			t.Fatalf("Append %d = %d, %v", i, seq, err)
		}
	}
	before, err := o.segments()
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{9, 10, 99, 100, 120} { // across digit counts
		if err := o.Ack(seq); err != nil {
			t.Fatalf("Ack(%d): %v", seq, err)
		}
	}
	after, err := o.segments()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) >= len(before) || len(after) != len(o.segs) {
		t.Errorf("segments: %d before the acks, %d after, %d listed by the outbox", len(before), len(after), len(o.segs))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != ackFile && !slices.Contains(after, filepath.Join(dir, e.Name())) {
			t.Errorf("the outbox left %s in its directory", e.Name())
		}
	}
	if err := o.close(); err != nil {
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
	if !slices.Equal(seqs, []uint64{121, 122, 123}) {
		t.Errorf("after reopen the outbox replays %v, want 121..123", seqs)
	}
	if oldest, next, acked := o2.cursor(); oldest != 121 || next != 124 || acked != 120 {
		t.Errorf("cursor = %d, %d, %d; want 121, 124, 120", oldest, next, acked)
	}
}
