package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binaries of one go test run share one cluster, and the cluster
// ends with the run. Here the run is a `sleep` standing for the go command,
// and its test binaries are two helper processes of this test binary:
// both attach to the same cluster (same port, one supervisor, one
// postmaster), each sees the other's database, and once both detached and
// the "go command" is gone the supervisor stops the postmaster and removes
// the run directory.
func TestPostgresIsSharedByTheRun(t *testing.T) {
	if os.Getenv(pgRunEnv) != "" {
		t.Skip("a helper process")
	}
	if _, err := pgBinDir(); err != nil {
		Missing(t, "PostgreSQL", "apt-get install postgresql", err)
	}
	goCmd := exec.Command("sleep", "600")
	if err := goCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = goCmd.Process.Kill(); _ = goCmd.Wait() })
	parent, ok := procOf(goCmd.Process.Pid)
	if !ok {
		t.Fatal("no start time for the sleep process")
	}
	run := filepath.Join(t.TempDir(), "run")

	// Two test binaries of the run, one after the other while the first
	// still runs: each prints the port and the supervisor, then waits for
	// its stdin to close before it detaches.
	helper := func() (*exec.Cmd, *Buffer, func()) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPostgresSharedHelper$", "-test.v")
		cmd.Env = append(os.Environ(), pgRunEnv+"="+run+":"+parent.String())
		out := new(Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out, func() { stdin.Close() }
	}
	waitLine := func(out *Buffer, prefix string) string {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(l, prefix) {
					return strings.TrimPrefix(l, prefix)
				}
			}
		}
		t.Fatalf("no %q from a helper: %s", prefix, out)
		return ""
	}
	cmd1, out1, done1 := helper()
	got1 := waitLine(out1, "attached ")
	cmd2, out2, done2 := helper()
	got2 := waitLine(out2, "attached ")
	if got1 != got2 {
		t.Errorf("the two test binaries attached to %q and %q; want one cluster", got1, got2)
	}
	st, ok := pgReadState(run)
	if !ok || !st.super.alive() {
		t.Fatalf("state %+v (%v): want a live supervisor", st, ok)
	}
	if n := pgLiveUsers(run); n != 2 {
		t.Errorf("%d users attached, want 2", n)
	}
	postmaster := st.dir + "/data/postmaster.pid"
	b, err := os.ReadFile(postmaster)
	if err != nil {
		t.Fatal(err)
	}
	pm, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	pmProc, ok := procOf(pm)
	if !ok {
		t.Fatalf("postmaster %d is not running", pm)
	}
	done1()
	done2()
	for _, c := range []*exec.Cmd{cmd1, cmd2} {
		if err := c.Wait(); err != nil {
			t.Errorf("helper: %v\n%s%s", err, out1, out2)
		}
	}
	// Both detached; the run (the sleep) goes on, so the cluster stays.
	if !st.super.alive() || !pmProc.alive() {
		t.Fatal("the cluster stopped while its run still goes on")
	}
	_ = goCmd.Process.Kill()
	_ = goCmd.Wait()
	for deadline := time.Now().Add(time.Minute); pmProc.alive() || st.super.alive(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the postmaster (%v) or its supervisor (%v) outlived the run", pmProc.alive(), st.super.alive())
		}
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("the run directory is still there: %v", err)
	}
	if _, err := os.Stat(st.dir); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory is still there: %v", err)
	}
}

// TestPostgresSharedHelper is a test binary of TestPostgresIsSharedByTheRun's
// run: it creates a database, prints the cluster it attached to, waits for
// its stdin to close and detaches.
func TestPostgresSharedHelper(t *testing.T) {
	if os.Getenv(pgRunEnv) == "" {
		t.Skip("run by TestPostgresIsSharedByTheRun")
	}
	t.Run("attach", func(t *testing.T) {
		Postgres(t)
		c, err := pgStart()
		if err != nil {
			t.Fatal(err)
		}
		if c.share == "" {
			t.Fatal("a private cluster, not the run's")
		}
		st, _ := pgReadState(c.share)
		os.Stdout.WriteString("attached " + strconv.Itoa(c.port) + " " + st.super.String() + "\n")
		_, _ = os.Stdin.Read(make([]byte, 1))
	})
	if err := StopPostgres(); err != nil {
		t.Error(err)
	}
}
