package execrelay_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berthdev/berth/internal/testenv"
)

// Nothing in the sandbox can speak as the host: a process of the relay's
// own account cannot open the relay's standard input through /proc (the
// relay is not dumpable), while it can a dumpable process's of the same
// account (the control).
func TestATaskOfTheRelaysAccountCannotWriteItsStdin(t *testing.T) {
	t.Parallel()
	a := testenv.UnprivilegedAccount(t)
	bin := a.Install(t, testenv.RunnerBinary(t))
	sock := filepath.Join(a.Dir(t), "run", "prp.sock")

	// Each process's stdin is a fifo of the account's (a pipe the host's
	// exec made would be the runtime's, which the account cannot open
	// anyway; ptrace is the other way in, and non-dumpable closes both).
	dir := a.Dir(t)
	start := func(argv ...string) *exec.Cmd {
		fifo := filepath.Join(dir, fmt.Sprintf("stdin-%d", len(argv)))
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(fifo, a.UID, a.GID); err != nil {
			t.Fatal(err)
		}
		in, err := os.OpenFile(fifo, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		cmd := a.Command(exec.Command(argv[0], argv[1:]...))
		cmd.Stdin = in
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		if argv[1] == "relay" { // up once it has greeted
			if _, err := io.ReadFull(out, make([]byte, len("berth-execrelay/1\n"))); err != nil {
				t.Fatal(err)
			}
		}
		return cmd
	}
	write := func(pid int) error {
		out, err := a.Command(exec.Command("sh", "-c", fmt.Sprintf("echo frame >/proc/%d/fd/0", pid))).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	relay := start(bin, "relay", "--socket", sock)
	control := start("sleep", "60")
	if err := write(control.Process.Pid); err != nil {
		t.Fatalf("the control: writing a dumpable process's stdin through /proc: %v; the check cannot tell", err)
	}
	if err := write(relay.Process.Pid); err == nil || !strings.Contains(err.Error(), "ermission denied") {
		t.Errorf("writing the relay's stdin through /proc as its own account: %v, want permission denied", err)
	}
}
