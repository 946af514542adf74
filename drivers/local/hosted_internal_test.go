package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A runner is not dumpable: unless berth runs as root it cannot read the
// runner's environment. hostedProcesses finds a runner of the lease
// directory by its --state-dir= argument alone (this process is a shell
// with that argument and no mark), and no process whose state directory
// is elsewhere. The shells wait in the read builtin and fork nothing: a
// child between its fork and its exec still shows its parent's command
// line, and would be found too (rightly: it is the runner's).
func TestHostedProcessesFindsARunnerByItsCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(stateDir string) *exec.Cmd {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", "read x", "--state-dir="+stateDir)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		cmd.Stdin = r
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		t.Cleanup(func() { w.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	runner := start(filepath.Join(dir, "state-0123"))
	other := start(filepath.Join(t.TempDir(), "state-0123"))
	var got []int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = hostedProcesses(dir); slices.Contains(got, runner.Process.Pid) {
			break
		}
	}
	if !slices.Equal(got, []int{runner.Process.Pid}) {
		t.Errorf("hostedProcesses(%s) = %v, want only %d (not %d, whose state directory is elsewhere)", dir, got, runner.Process.Pid, other.Process.Pid)
	}
}
