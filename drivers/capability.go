package drivers

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"strings"
	"time"
)

// Capability names one operation a driver may offer beyond acquire, exec and
// release. Each capability is tied to one optional interface (see
// optional.go; CapReattach and CapReuse share Resumer, CapReuse promising
// more of it); Effective resolves whether a driver really provides it.
type Capability uint8

// The capabilities. Exec is implied by the required Sandbox interface and is
// always implemented; every other capability needs its optional interface.
const (
	// CapExec: bounded commands through Sandbox.Exec.
	CapExec Capability = iota
	// CapStreamExec: streaming processes with signals (StreamExecer).
	CapStreamExec
	// CapReuse: a sandbox released with Stop keeps its state and Resume
	// starts it again (Resumer); needed by the reusable lease policies.
	// It promises more than CapReattach and is effective only with it.
	CapReuse
	// CapList: list sandboxes by labels (Lister); needed by orphan sweeps.
	CapList
	// CapDestroyByID: destroy a sandbox by provider lease id without a handle
	// (Destroyer); needed to retry cleanups after a crash.
	CapDestroyByID
	// CapImageIdentity: report the live image identity (ImageReporter).
	CapImageIdentity
	// CapTerminal: interactive PTY sessions (Terminal).
	CapTerminal
	// CapTemplateCapture: capture the sandbox as a new image (Capturer).
	CapTemplateCapture
	// CapTemplateDelete: delete a captured image at the provider (TemplateDeleter).
	CapTemplateDelete
	// CapRunnerIngress: the sandbox hosts berth's runner and carries its connections to the host (RunnerHost).
	CapRunnerIngress
	// CapFiles: tar streams of the sandbox's files both ways and a
	// directory's listing, under its working directory (Files).
	CapFiles
	// CapReattach: reopen a live sandbox by provider lease id from any
	// process (Resumer): another replica's or a restarted process's lease,
	// a warm-pool member made elsewhere. A driver whose sandboxes cannot
	// be stopped and started again (Kubernetes pods) declares it without
	// CapReuse.
	CapReattach

	numCapabilities
)

var capNames = [numCapabilities]string{
	CapExec:            "exec",
	CapStreamExec:      "stream_exec",
	CapReuse:           "reuse",
	CapList:            "list",
	CapDestroyByID:     "destroy_by_id",
	CapImageIdentity:   "image_identity",
	CapTerminal:        "terminal",
	CapTemplateCapture: "template_capture",
	CapTemplateDelete:  "template_delete",
	CapRunnerIngress:   "runner_ingress",
	CapFiles:           "files",
	CapReattach:        "reattach",
}

// String returns the stable snake_case name ("exec", "stream_exec", ...).
func (c Capability) String() string {
	if c < numCapabilities {
		return capNames[c]
	}
	return fmt.Sprintf("capability(%d)", uint8(c))
}

// parseCapability returns the capability with the given stable name.
func parseCapability(s string) (Capability, error) {
	for i, n := range capNames {
		if n == s {
			return Capability(i), nil
		}
	}
	return 0, fmt.Errorf("drivers: unknown capability %q", s)
}

// MarshalText implements encoding.TextMarshaler.
func (c Capability) MarshalText() ([]byte, error) {
	if c >= numCapabilities {
		return nil, fmt.Errorf("drivers: unknown capability %d", uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: it reads a stable
// name ("exec", "stream_exec", ...); an unknown name is an error.
func (c *Capability) UnmarshalText(b []byte) error {
	v, err := parseCapability(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Set is an immutable set of capabilities. The zero Set is empty. Sets
// combine with Go's bit operators: a|b holds both, a&b what they share,
// a&^b a without b.
type Set uint32

// Sets of capabilities that resolution (CAP-2) and the conformance suite
// plan with.
const (
	// allCapabilities holds every capability.
	allCapabilities Set = 1<<numCapabilities - 1
	// sandboxLevel holds the capabilities tied to an optional interface of a
	// Sandbox (StreamExecer, ImageReporter, Terminal, Capturer,
	// RunnerHost, Files). Only a live sandbox can show that they are implemented.
	sandboxLevel Set = 1<<CapStreamExec | 1<<CapImageIdentity | 1<<CapTerminal | 1<<CapTemplateCapture | 1<<CapRunnerIngress | 1<<CapFiles
)

// NewSet returns the set holding caps; an unknown capability is left out.
// s|NewSet(c) is s plus c.
func NewSet(caps ...Capability) Set {
	var s Set
	for _, c := range caps {
		if c < numCapabilities {
			s |= 1 << c
		}
	}
	return s
}

// Has reports whether c is in s.
func (s Set) Has(c Capability) bool { return c < numCapabilities && s&(1<<c) != 0 }

// Missing returns the capabilities of required that s lacks, in declaration order.
func (s Set) Missing(required Set) []Capability { return (required &^ s).List() }

// size returns the number of capabilities in s.
func (s Set) size() int { return bits.OnesCount32(uint32(s)) }

// List returns the capabilities in s in declaration order.
func (s Set) List() []Capability {
	out := make([]Capability, 0, s.size())
	for c := Capability(0); c < numCapabilities; c++ {
		if s.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String returns the names joined by commas, "" for the empty set.
func (s Set) String() string {
	names := make([]string, 0, s.size())
	for _, c := range s.List() {
		names = append(names, c.String())
	}
	return strings.Join(names, ",")
}

// MarshalJSON renders the set as a JSON array of capability names.
func (s Set) MarshalJSON() ([]byte, error) { return json.Marshal(s.List()) }

// UnmarshalJSON reads a JSON array of capability names; an unknown name is an error.
func (s *Set) UnmarshalJSON(b []byte) error {
	var caps []Capability
	if err := json.Unmarshal(b, &caps); err != nil {
		return err
	}
	*s = NewSet(caps...)
	return nil
}

// Kind says what a lease of a driver is.
type Kind int

const (
	// KindSandbox drivers allocate an isolated sandbox per lease (docker, daytona, fake).
	KindSandbox Kind = iota
	// KindHost drivers open a session on an existing host (local, ssh); release
	// ends the session and never destroys the host.
	KindHost
)

// String returns "sandbox" or "host".
func (k Kind) String() string {
	if k == KindHost {
		return "host"
	}
	return "sandbox"
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Capabilities is what a driver declares about itself. It is static: a driver
// computes it without I/O, and reading it never allocates anything (CAP-1).
type Capabilities struct {
	// Kind says whether leases are sandboxes or host sessions.
	Kind Kind `json:"kind"`
	// Declared is the set the driver claims. Effective intersects it with
	// what the driver implements.
	Declared Set `json:"declared"`
	// StartupBudget is the provider-declared time a lease may take to start,
	// used when the environment configures none (LEASE-3). Zero means the
	// provider declares none.
	StartupBudget time.Duration `json:"startupBudget,omitempty"`
}
