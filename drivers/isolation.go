package drivers

import (
	"fmt"

	"github.com/berthdev/berth/drivers/config"
)

// Isolation is how far a target keeps the task it runs from the machine it
// runs on, an ordered level: IsolationNone < IsolationContainer <
// IsolationGVisor < IsolationMicroVM, so a level meets a minimum when it is
// >= it. The zero Isolation is IsolationNone, the level of a driver that
// declares none (IsolationDeclarer). Its text form (JSON) is its name:
// "none", "container", "gvisor", "microvm".
type Isolation uint8

// The isolation levels, weakest first.
const (
	// IsolationNone: the task runs on the host itself (local, SSH).
	IsolationNone Isolation = iota
	// IsolationContainer: a container sharing its engine's kernel.
	IsolationContainer
	// IsolationGVisor: a container under gVisor, a kernel in user space
	// between the task and the host's kernel (Docker's runsc runtime).
	IsolationGVisor
	// IsolationMicroVM: a virtual machine, with its own kernel, per
	// sandbox.
	IsolationMicroVM

	numIsolations
)

var isolationNames = [numIsolations]string{
	IsolationNone:      "none",
	IsolationContainer: "container",
	IsolationGVisor:    "gvisor",
	IsolationMicroVM:   "microvm",
}

// String returns the level's name ("none", "container", "gvisor",
// "microvm").
func (i Isolation) String() string {
	if i < numIsolations {
		return isolationNames[i]
	}
	return fmt.Sprintf("isolation(%d)", uint8(i))
}

// MarshalText returns the level's name; an unknown level is an error.
func (i Isolation) MarshalText() ([]byte, error) {
	if i >= numIsolations {
		return nil, fmt.Errorf("drivers: unknown isolation level %d", uint8(i))
	}
	return []byte(isolationNames[i]), nil
}

// UnmarshalText reads a level's name; another name is an error wrapping
// config.ErrInvalid that lists the names.
func (i *Isolation) UnmarshalText(b []byte) error {
	for l, n := range isolationNames {
		if n == string(b) {
			*i = Isolation(l)
			return nil
		}
	}
	return fmt.Errorf("isolation level %q: want none, container, gvisor or microvm: %w", b, config.ErrInvalid)
}

// IsolationDeclarer is an optional interface that may be implemented by a
// Driver whose targets are isolated from the machine they run on.
// Isolation returns, without I/O, the level the sandboxes Acquire creates
// for cfg (normalized) give: local and SSH none, Docker container (gvisor
// under its runsc runtime), Daytona container. The conformance suite
// measures it inside a live sandbox and fails a driver that declares more
// than it measures. If a Driver does not implement it, its level is
// IsolationNone. IsolationOf reads it.
type IsolationDeclarer interface {
	Isolation(cfg config.Config) Isolation
}

// IsolationOf returns the level d declares for cfg (IsolationDeclarer), or
// IsolationNone when d does not implement it. A nil cfg asks for the
// level of the driver's defaults, as the drivers listing shows it. It
// does no I/O.
func IsolationOf(d Driver, cfg config.Config) Isolation {
	if id, ok := d.(IsolationDeclarer); ok {
		if l := id.Isolation(cfg); l < numIsolations {
			return l
		}
	}
	return IsolationNone
}
