package runner_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRunnerBinary()
	os.Exit(code)
}

// startChild starts the runner binary; it is killed when the test ends.
func startChild(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	return testenv.StartRunner(t, env, args...)
}

// procState returns a process's state letter and process group, ok false
// when it is gone.
func procState(pid int) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	pgid, _ = strconv.Atoi(f[2])
	return f[0][0], pgid, true
}

// tagged returns the live processes whose environment holds entry.
func tagged(entry string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == entry {
				if st, _, ok := procState(pid); ok && st != 'Z' {
					out = append(out, pid)
				}
				break
			}
		}
	}
	return out
}

func runnerTag(t *testing.T, state, task string) string {
	t.Helper()
	id, err := os.ReadFile(filepath.Join(state, "id"))
	if err != nil {
		t.Fatal(err)
	}
	return "BERTH_TASK_TAG=" + strings.TrimSpace(string(id)) + ":" + task
}

// PRP-4, PRP-2: the runner (a real process, ticket in BERTH_PRP_TICKET) is
// killed with SIGKILL while a task runs; the restarted runner reports the
// command indeterminate, stops what the task left, and a redelivered
// command is answered from the journal: the command never runs twice. No
// task sees the ticket.
func TestKill9MidCommandNeverRunsTwice(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	state, marker, envFile := filepath.Join(dir, "state"), filepath.Join(dir, "marker"), filepath.Join(dir, "env")
	ticket := c.ticket("lease-1", prp.ScopeTask, time.Minute)
	args := []string{"--controller", c.URL(), "--lease", "lease-1", "--state-dir", state}
	first := startChild(t, []string{"BERTH_PRP_TICKET=" + ticket}, args...)
	cmd := c.command(startCmd("c1", "t1", "sh", "-c", "echo ran >> "+marker+"; env > "+envFile+"; echo started; exec sleep 300"))
	c.waitFor("t1 started", func() bool {
		for _, e := range c.events {
			if e.Kind == prp.EventOutput && e.TaskID == "t1" && strings.Contains(string(e.Output.Data), "started") {
				return true
			}
		}
		return false
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	tag := runnerTag(t, state, "t1")
	if n := len(tagged(tag)); n != 1 {
		t.Fatalf("after the runner's kill -9, %d processes carry the task's tag, want its sleep", n)
	}

	c.mu.Lock()
	session := c.lastSession
	c.mu.Unlock()
	// The token died with the runner (memory only): the restart rejoins
	// the session with a resume ticket.
	startChild(t, []string{"BERTH_PRP_TICKET=" + c.resumeTicket(session)}, args...)
	res := c.waitResults("c1", 1)[0]
	if res.Status != prp.ResultIndeterminate || res.Duplicate {
		t.Errorf("result after the restart = %+v, want indeterminate", res)
	}
	c.waitFor("the proof for t1", func() bool {
		for _, e := range c.events {
			if e.Kind == prp.EventProof && e.TaskID == "t1" {
				return true
			}
		}
		return false
	})
	if p := c.eventsOf(prp.EventProof, "t1")[0].Proof; !p.Complete {
		t.Errorf("proof for the interrupted task = %+v, want complete", p)
	}
	c.command(cmd) // redelivered, as a controller that lost track would
	dup := c.waitResults("c1", 2)[1]
	if !dup.Duplicate || dup.Status != prp.ResultIndeterminate {
		t.Errorf("redelivered command: %+v, want the indeterminate result marked duplicate", dup)
	}
	if b, _ := os.ReadFile(marker); string(b) != "ran\n" {
		t.Errorf("marker = %q: the command ran more than once", b)
	}
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "BERTH_PRP_TICKET") || strings.Contains(string(env), ticket[6:]) {
		t.Error("the task saw the ticket")
	}
	if !strings.Contains(string(env), tag) {
		t.Errorf("the task's environment lacks its tag %s", tag)
	}
	if n := len(tagged(tag)); n != 0 {
		t.Errorf("%d processes of the interrupted task are left", n)
	}
}

// PRP-6: task.stop on a tree of 50 processes, one of which escaped with
// setsid into its own session and group: all are gone, and the proof (both
// checks) is complete. The runner is a real process, its ticket in a 0600
// file that is gone before the task starts.
func TestStopProofFiftyProcessTree(t *testing.T) {
	t.Parallel()
	c := newController(t)
	dir := t.TempDir()
	state, ticketFile := filepath.Join(dir, "state"), filepath.Join(dir, "ticket")
	if err := os.WriteFile(ticketFile, []byte(c.ticket("lease-1", prp.ScopeTask, time.Minute)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startChild(t, nil, "--controller", c.URL(), "--lease", "lease-1", "--state-dir", state, "--ticket-file", ticketFile)
	c.waitFor("the hello", func() bool { return len(c.hellos) > 0 })
	if _, err := os.Stat(ticketFile); !os.IsNotExist(err) {
		t.Errorf("the ticket file is still there after the hello: %v", err)
	}
	c.command(startCmd("c1", "t1", "sh", "-c", "for i in $(seq 48); do sleep 300 & done; setsid sleep 300 & wait"))
	c.waitFor("t1 started", func() bool { return len(c.resultsLocked("c1")) > 0 || hasStarted(c.events, "t1") })
	tag := runnerTag(t, state, "t1")
	leader := c.eventsOf(prp.EventStarted, "t1")[0].PID
	var pids []int
	escapee := 0
	// Wait (polling, bounded) until the tree is complete and the escapee
	// has called setsid.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		pids, escapee = tagged(tag), 0
		for _, pid := range pids {
			if _, pgid, ok := procState(pid); ok && pgid != leader {
				escapee = pid
			}
		}
		if (len(pids) >= 50 && escapee != 0) || time.Now().After(deadline) {
			break
		}
	}
	if len(pids) != 50 || escapee == 0 {
		t.Fatalf("the tree has %d tagged processes (escapee %d), want 50 with one outside the task's group", len(pids), escapee)
	}

	c.command(stopCmd("c2", "t1", 2*time.Second))
	res := c.waitResults("c2", 1)[0]
	p := res.Proof
	if res.Status != prp.ResultDone || p == nil || !p.Complete || len(p.Survivors) != 0 || len(p.Failed) != 0 ||
		len(p.Methods) != 2 || p.Methods[0] != prp.MethodGroup || p.Methods[1] != prp.MethodProcTag || p.VerifiedAt.IsZero() {
		t.Fatalf("stop result = %+v, proof %+v; want done with a complete proof by both methods", res, p)
	}
	if left := tagged(tag); len(left) != 0 {
		t.Errorf("after a complete proof, processes %v still carry the tag", left)
	}
	if st, _, ok := procState(escapee); ok && st != 'Z' {
		t.Errorf("the setsid escapee %d is still alive (state %c)", escapee, st)
	}
	if ex := c.waitResults("c1", 1)[0]; ex.Exit == nil || ex.Exit.Signal == "" {
		t.Errorf("the stopped task's result = %+v, want an exit by signal", ex)
	}
}

func hasStarted(events []prp.Event, task string) bool {
	for _, e := range events {
		if e.Kind == prp.EventStarted && e.TaskID == task {
			return true
		}
	}
	return false
}
