package runner

import (
	"fmt"
	"testing"

	"github.com/berthdev/berth/internal/prp"
)

// PRP-4: the task.start a later command for the same task finds is the
// first one journaled, whatever the map order, so that the later command
// is refused (task_exists) instead of running the task again.
func TestTaskStartIsTheFirstJournaled(t *testing.T) {
	t.Parallel()
	j, _, err := openJournal(t.TempDir(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	for i := 1; i <= 20; i++ {
		if err := j.record(journalEntry{Seq: uint64(i), ID: fmt.Sprintf("c%d", i), Kind: prp.CommandTaskStart, TaskID: "t1", State: prp.JournalReceived}); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if e, ok := j.taskStart("t1"); !ok || e.ID != "c1" {
			t.Fatalf("taskStart(t1) = %s, %v; want c1, the first journaled", e.ID, ok)
		}
	}
}
