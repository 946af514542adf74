package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
)

// PRP-6: stop-and-verify of a 50-process tree with a setsid escapee, run
// by the runner binary as a child process: every process is gone and the
// runner's proof is complete.
func TestStopAndVerifyStopsAProcessTreeWithACompleteProof(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{})
	startChild(t, s, t.TempDir(), "")
	session := waitSession(t, s)
	ctx := context.Background()
	// sh, 48 sleeps in its group and one that escapes with setsid: 50.
	script := `for i in $(seq 48); do sleep 1000 & done; setsid sleep 1000 & wait`
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "tree", Argv: []string{"sh", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for len(tagged("tree")) < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("the tree has %d tagged processes after a minute, want 50", len(tagged("tree")))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A task whose start was rejected is not stopped; a finished one is
	// verified too.
	if _, err := s.c.StartTask(ctx, operator, session, "c2", prp.TaskStart{TaskID: "quick", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	wait(t, s, session, "c2")
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	proofs, err := s.c.StopAndVerify(sctx, operator, session, time.Second)
	if err != nil {
		t.Fatalf("StopAndVerify: %v", err)
	}
	if len(proofs) != 2 {
		t.Fatalf("StopAndVerify returned %d proofs, want 2 (tree, quick)", len(proofs))
	}
	for _, p := range proofs {
		if !p.Complete || len(p.Survivors) != 0 || !has(p.Methods, prp.MethodGroup) || !has(p.Methods, prp.MethodProcTag) {
			t.Errorf("proof of %s = %+v, want complete by group and tag scan, no survivors", p.TaskID, p)
		}
	}
	if left := tagged("tree"); len(left) != 0 {
		t.Errorf("processes of the tree still alive after a complete proof: %v", left)
	}
	// The start's result reports the signal that ended the tree's shell.
	if res := wait(t, s, session, "c1"); res.Exit == nil || res.Exit.Code != -1 || res.Exit.Signal == "" {
		t.Errorf("result of the stopped task = %+v, want an exit by signal", res.Exit)
	}
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// PRP-4, PRP-6: a runner killed with -9 while a task runs reports the task
// start indeterminate after its restart (same session, resumed) and never
// runs it again; stop-and-verify still stops the tree the dead runner left
// behind, with a complete proof.
func TestKilledRunnerLeavesAnIndeterminateTaskThatIsStillStopped(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{})
	state := t.TempDir()
	child := startChild(t, s, state, "")
	session := waitSession(t, s)
	ctx := context.Background()
	marker := filepath.Join(t.TempDir(), "started")
	script := `echo started >> "$1"; for i in $(seq 5); do sleep 1000 & done; wait`
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "left", Argv: []string{"sh", "-c", script, "sh", marker}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for len(tagged("left")) < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("the task has %d tagged processes after a minute, want 6", len(tagged("left")))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	startChild(t, s, state, session) // resumes the session with a resume ticket
	res := wait(t, s, session, "c1")
	if res.Status != prp.ResultIndeterminate {
		t.Errorf("result of the task start after kill -9 = %+v, want indeterminate", res)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	proofs, err := s.c.StopAndVerify(sctx, operator, session, time.Second)
	if err != nil {
		t.Fatalf("StopAndVerify: %v", err)
	}
	if len(proofs) != 1 || !proofs[0].Complete || len(proofs[0].Survivors) != 0 {
		t.Errorf("proofs = %+v, want one complete proof without survivors", proofs)
	}
	if left := tagged("left"); len(left) != 0 {
		t.Errorf("processes of the task still alive after a complete proof: %v", left)
	}
	if b, err := os.ReadFile(marker); err != nil || strings.Count(string(b), "started") != 1 {
		t.Errorf("the task started %d times (%v), want once", strings.Count(string(b), "started"), err)
	}
}
