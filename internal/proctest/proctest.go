// Package proctest finds and launches processes of this host for the
// tests of drivers whose runners are host processes (local, ssh, docker)
// and for drivers/drivertest's runner checks. Linux only: it reads /proc.
package proctest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// launchMarkEnv is the variable LaunchUnserved sets in a runner's
// environment (RunnerLaunch.Env), with a value of its own, to find it.
const launchMarkEnv = "BERTH_CONFORMANCE_RUNNER"

// LivePIDs returns the live (neither zombie nor gone) processes of this
// host whose argv or environment, each as its NUL-separated /proc file with
// a NUL in front, contains s: "\x00--flag\x00value\x00" matches two
// consecutive arguments, "\x00NAME=value\x00" an environment entry. It is
// the one process scanner of the driver tests.
func LivePIDs(s string) []int {
	want := []byte(s)
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !Alive(pid) {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/" + f); err == nil && bytes.Contains(append([]byte{0}, b...), want) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// Alive reports whether pid is a process of this host that is neither a
// zombie nor gone.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	return len(f) > 0 && string(f[0]) != "Z" && string(f[0]) != "X"
}

// LaunchUnserved launches a runner through in, which nobody serves (the
// runner waits for its controller), with a random ticket, lease and env
// (plus a mark of its own, BERTH_CONFORMANCE_RUNNER), and waits until it is exactly one live process of
// this host. It fails the test unless it is, or if a live process holds
// the ticket in its argv or environment. The runner is killed at cleanup.
func LaunchUnserved(t *testing.T, ctx context.Context, in drivers.RunnerIngress, lease string, env map[string]string) (pid int) {
	t.Helper()
	mark, ticket := randomHex(t, 6), randomHex(t, 32)
	all := map[string]string{launchMarkEnv: mark}
	for k, v := range env {
		all[k] = v
	}
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: lease, Ticket: ticket, Env: all}); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	var pids []int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		pids = runnersMarked(mark)
		if len(pids) > 0 {
			break
		}
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if len(pids) != 1 {
		t.Fatalf("runner processes launched through %s: %v, want one", in.Endpoint(), pids)
	}
	if leaks := LivePIDs(ticket); len(leaks) > 0 {
		t.Errorf("processes %v hold the runner's ticket in their argv or environment", leaks)
	}
	return pids[0]
}

// runnersMarked returns the live runner processes (argv with --controller)
// whose environment holds launchMarkEnv=mark.
func runnersMarked(mark string) []int {
	var out []int
	for _, pid := range LivePIDs("\x00" + launchMarkEnv + "=" + mark + "\x00") {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && bytes.Contains(b, []byte("\x00--controller\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// randomHex returns n random bytes in hex.
func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
