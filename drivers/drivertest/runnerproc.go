package drivertest

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// HostProcessHarness is an optional interface of a RunnerHarness whose
// runners are processes of the machine the suite runs on (the local
// driver, an SSH server or a container engine on this host), so that the
// suite finds them in /proc. RunnersAreHostProcesses returns true where
// that holds; the suite then checks that a launched runner is one process
// that holds the ticket in neither its argv nor its environment, and that
// Release(Destroy) ends it.
type HostProcessHarness interface {
	RunnerHarness
	RunnersAreHostProcesses() bool
}

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
	mark, ticket := uniqueSuffix(), randomHex(t, 32)
	all := map[string]string{launchMarkEnv: mark}
	for k, v := range env {
		all[k] = v
	}
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: lease, Ticket: ticket, Env: all}); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	var pids []int
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
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

// testRunnerProcess: a runner launched through the ingress is one process
// of this host without its ticket in argv or environment, and
// Release(Destroy) ends it with a receipt that proves the destroy
// (a runner runs in a session of its own, so this is the driver's doing,
// not the end of the launching command's process group).
func testRunnerProcess(t *testing.T, ctx context.Context, h Harness) {
	ph, ok := h.(HostProcessHarness)
	if !ok || !ph.RunnersAreHostProcesses() {
		t.Skipf("the harness of driver %q does not say its runners are processes of this host (drivertest.HostProcessHarness)", h.Driver().Name())
	}
	spec := ph.RunnerSpec(t)
	sb := acquire(t, ctx, h, drivers.AcquireRequest{LeaseID: "runner-process-" + uniqueSuffix(), Runner: &spec})
	host, err := drivers.SandboxAs[drivers.RunnerHost](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	in, err := host.HostRunner(ctx, spec)
	if err != nil {
		t.Fatalf("HostRunner: %v", err)
	}
	defer in.Close()
	pid := LaunchUnserved(t, ctx, in, "conformance-lease", nil)
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil {
		t.Fatalf("Release(destroy): %v", err)
	}
	if !r.Proves(sb.ID(), drivers.Destroy) {
		t.Errorf("receipt %+v does not prove destroy of %q", r, sb.ID())
	}
	for deadline := time.Now().Add(promptBound); Alive(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if Alive(pid) {
		t.Errorf("Release(destroy) left the runner (pid %d) running", pid)
	}
}
