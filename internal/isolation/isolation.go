// Package isolation measures the isolation a task inside a sandbox sees
// (drivers.Isolation), for berth's probe and the conformance suite
// (drivers/drivertest) alike: one measurement, so that what the suite
// proves of a driver is what the probe records of a target.
package isolation

import (
	"context"
	"fmt"
	"strings"

	"github.com/berthdev/berth/drivers"
)

// Exec runs one command in the sandbox being measured (a drivers.Sandbox's
// Exec, or a lease handle's).
type Exec func(ctx context.Context, cmd drivers.Command) (*drivers.Result, error)

// Evidence is what a task inside a sandbox saw of its kernel, and the
// kernel it was compared with.
type Evidence struct {
	// Host is true for a host target: nothing was run.
	Host bool
	// Release is what uname -r printed in the task; "" when it printed
	// nothing.
	Release string
	// HostKernel is the kernel release of the machine the sandbox runs on
	// (the engine's, not berth's own uname); "" when unknown.
	HostKernel string
	// Version is /proc/version, "" when unreadable.
	Version string
	// Log is the start of the kernel log (dmesg), "" when unreadable.
	Log string
}

// NamesGVisor reports whether /proc/version or the kernel log names
// gVisor.
func (e Evidence) NamesGVisor() bool { return namesGVisor(e.Version) || namesGVisor(e.Log) }

// String is the evidence in one line for a person or a log: never a
// secret (kernel releases and versions only).
func (e Evidence) String() string {
	if e.Host {
		return "a host target: the task runs on the host itself"
	}
	host := e.HostKernel
	if host == "" {
		host = "unknown"
	}
	if e.Release != "" && e.Release == e.HostKernel {
		return fmt.Sprintf("the task's kernel %q is the host's: a shared kernel", e.Release)
	}
	s := fmt.Sprintf("the task's kernel %q, the host's %q", e.Release, host)
	if e.Version != "" {
		s += fmt.Sprintf("; /proc/version %q", clip(e.Version, 120))
	} else {
		s += "; /proc/version unreadable"
	}
	if e.Log != "" {
		s += fmt.Sprintf("; kernel log %d bytes, names gVisor: %t", len(e.Log), namesGVisor(e.Log))
	} else {
		s += "; kernel log unreadable"
	}
	return s
}

// logLimit caps the bytes of kernel log read: gVisor names itself in its
// first lines.
const logLimit = 16 << 10

// Measure returns the level a sandbox shows and the evidence, given the
// kernel release of the machine it runs on (hostKernel: the Docker
// engine's KernelVersion for Docker; "" when unknown). A host target
// (host true) measures none without running anything. A sandbox whose
// kernel release equals the host's shares its kernel: container. One
// whose release differs has a kernel of its own: gvisor when /proc/version
// or the kernel log names gVisor; microvm when either is readable and
// names no gVisor; gvisor, the weaker of the two, when neither is
// readable. With the host's release unknown only a kernel that names
// gVisor proves anything (gvisor); anything else measures none. A task
// that cannot name its kernel proves no isolation (none). The error is
// exec's, for the first command only (uname -r).
func Measure(ctx context.Context, host bool, hostKernel string, exec Exec) (drivers.Isolation, Evidence, error) {
	ev := Evidence{Host: host, HostKernel: hostKernel}
	if host {
		return drivers.IsolationNone, ev, nil
	}
	res, err := exec(ctx, drivers.Command{Argv: []string{"uname", "-r"}, OutputLimit: 256})
	if err != nil {
		return drivers.IsolationNone, ev, err
	}
	ev.Release = strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || ev.Release == "" {
		return drivers.IsolationNone, ev, nil
	}
	if hostKernel != "" && ev.Release == hostKernel {
		return drivers.IsolationContainer, ev, nil
	}
	if res, err := exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "cat /proc/version"}, OutputLimit: 4096}); err == nil && res.ExitCode == 0 {
		ev.Version = strings.TrimSpace(string(res.Stdout))
	}
	if res, err := exec(ctx, drivers.Command{Argv: []string{"dmesg"}, OutputLimit: logLimit}); err == nil && res.ExitCode == 0 {
		ev.Log = strings.TrimSpace(string(res.Stdout))
	}
	switch {
	case ev.NamesGVisor():
		return drivers.IsolationGVisor, ev, nil
	case hostKernel == "":
		return drivers.IsolationNone, ev, nil
	case ev.Version != "" || ev.Log != "":
		return drivers.IsolationMicroVM, ev, nil
	}
	return drivers.IsolationGVisor, ev, nil
}

func namesGVisor(s string) bool { return strings.Contains(strings.ToLower(s), "gvisor") }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
