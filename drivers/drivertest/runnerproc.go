package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/proctest"
)

// HostProcessHarness is an optional interface that may be implemented by
// a Harness that also implements RunnerHarness, whose runners are processes of the machine the suite runs on (the local
// driver, an SSH server or a container engine on this host), so that the
// suite finds them in /proc. RunnersAreHostProcesses returns true where
// that holds; the suite then checks that a launched runner is one process
// that holds the ticket in neither its argv nor its environment, and that
// Release(Destroy) ends it.
type HostProcessHarness interface {
	RunnersAreHostProcesses() bool
}

// testRunnerProcess: a runner launched through the ingress is one process
// of this host without its ticket in argv or environment, and
// Release(Destroy) ends it with a receipt that proves the destroy
// (a runner runs in a session of its own, so this is the driver's doing,
// not the end of the launching command's process group).
func testRunnerProcess(t *testing.T, ctx context.Context, h Harness) {
	ph, ok := h.(HostProcessHarness)
	rh, isRunner := h.(RunnerHarness)
	if !ok || !isRunner || !ph.RunnersAreHostProcesses() {
		t.Skipf("the harness of driver %q does not say its runners are processes of this host (drivertest.HostProcessHarness)", h.Driver().Name())
	}
	spec := rh.RunnerSpec(t)
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
	pid := proctest.LaunchUnserved(t, ctx, in, "conformance-lease", nil)
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil {
		t.Fatalf("Release(destroy): %v", err)
	}
	if !r.Proves(sb.ID(), drivers.Destroy) {
		t.Errorf("receipt %+v does not prove destroy of %q", r, sb.ID())
	}
	for deadline := time.Now().Add(promptBound); proctest.Alive(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if proctest.Alive(pid) {
		t.Errorf("Release(destroy) left the runner (pid %d) running", pid)
	}
}
