package drivertest

import (
	"context"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
)

// IsolationHarness is the interface a Harness implements when its driver
// declares an isolation level above none for the harness's config
// (drivers.IsolationOf). HostKernel returns the kernel release (as uname
// -r prints it) of the machine the harness's sandboxes run on: the Docker
// engine's KernelVersion (docker info), not this process's own uname,
// since the engine may be remote. The isolation subtest compares what the
// task sees with it.
type IsolationHarness interface {
	HostKernel(ctx context.Context) (string, error)
}

// isolationEvidence is what a task inside a sandbox saw of its kernel.
type isolationEvidence struct {
	release string // uname -r
	version string // /proc/version, "" when unreadable
	dmesg   string // the start of the kernel log, "" when unreadable
}

// dmesgLimit caps the bytes of kernel log the suite reads: gVisor names
// itself in its first lines.
const dmesgLimit = 16 << 10

// measureIsolation returns the level sb shows and the evidence, given the
// kernel release of the machine it runs on (hostKernel, "" for a host
// target). A host target measures none. A sandbox whose kernel release
// equals the host's shares its kernel: container. One whose release
// differs has a kernel of its own: gvisor when /proc/version or the kernel
// log names gVisor; microvm when either is readable and names no gVisor;
// gvisor, the weaker of the two, when neither is readable.
func measureIsolation(ctx context.Context, kind drivers.Kind, sb drivers.Sandbox, hostKernel string) (drivers.Isolation, isolationEvidence, error) {
	var ev isolationEvidence
	if kind == drivers.KindHost {
		return drivers.IsolationNone, ev, nil
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"uname", "-r"}})
	if err != nil {
		return 0, ev, err
	}
	ev.release = strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || ev.release == "" {
		// A task that cannot name its kernel proves no isolation.
		return drivers.IsolationNone, ev, nil
	}
	if ev.release == hostKernel {
		return drivers.IsolationContainer, ev, nil
	}
	if res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "cat /proc/version"}, OutputLimit: 4096}); err == nil && res.ExitCode == 0 {
		ev.version = strings.TrimSpace(string(res.Stdout))
	}
	if res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"dmesg"}, OutputLimit: dmesgLimit}); err == nil && res.ExitCode == 0 {
		ev.dmesg = strings.TrimSpace(string(res.Stdout))
	}
	switch {
	case namesGVisor(ev.version) || namesGVisor(ev.dmesg):
		return drivers.IsolationGVisor, ev, nil
	case ev.version != "" || ev.dmesg != "":
		return drivers.IsolationMicroVM, ev, nil
	}
	return drivers.IsolationGVisor, ev, nil
}

func namesGVisor(s string) bool { return strings.Contains(strings.ToLower(s), "gvisor") }

// testIsolation: the level a driver declares for the harness's config
// (drivers.IsolationDeclarer) is at most what a task inside a live sandbox
// shows (measureIsolation); a driver that declares more fails, naming
// both levels and the evidence. Declaring less than measured is allowed.
func testIsolation(t *testing.T, ctx context.Context, h Harness) {
	d := h.Driver()
	declared := drivers.IsolationOf(d, h.Config())
	kind := d.Capabilities().Kind
	if declared == drivers.IsolationNone {
		t.Skipf("driver %q declares isolation none: nothing to prove", d.Name())
	}
	var hostKernel string
	if kind != drivers.KindHost {
		ih, ok := h.(IsolationHarness)
		if !ok {
			t.Fatalf("driver %q declares isolation %s, but the harness does not implement drivertest.IsolationHarness: the suite needs the host's kernel release to measure it", d.Name(), declared)
		}
		var err error
		if hostKernel, err = ih.HostKernel(ctx); err != nil || hostKernel == "" {
			t.Fatalf("HostKernel: %q, %v; want the kernel release of the machine the sandboxes run on", hostKernel, err)
		}
	}
	sb := acquire(t, ctx, h, drivers.AcquireRequest{LeaseID: "conformance-" + uniqueSuffix()})
	measured, ev, err := measureIsolation(ctx, kind, sb, hostKernel)
	if err != nil {
		t.Fatalf("measuring isolation: %v", err)
	}
	t.Logf("declared %s, measured %s (kind %v; the task's kernel %q, the host's %q; /proc/version %q; dmesg %d bytes, names gVisor: %v)",
		declared, measured, kind, ev.release, hostKernel, ev.version, len(ev.dmesg), namesGVisor(ev.dmesg))
	if declared > measured {
		t.Errorf("driver %q declares isolation %s but its sandbox measures %s (kind %v; the task's kernel %q, the host's %q; /proc/version %q; the kernel log names gVisor: %v)",
			d.Name(), declared, measured, kind, ev.release, hostKernel, ev.version, namesGVisor(ev.dmesg))
	}
}
