package drivers

import (
	"github.com/berthdev/berth/drivers/config"

	"context"
	"fmt"
	"io"
	"time"
)

// Driver is a kind of execution target (local, ssh, docker, daytona, fake).
// A Driver is safe for concurrent use. Name, Capabilities and Schema do no
// I/O. Optional powers are optional interfaces on the Driver and on its
// live Sandbox values (see resolve.go).
type Driver interface {
	// Name returns the stable driver name ("ssh", "docker", ...).
	Name() string
	// Capabilities returns the static declaration (CAP-1). It never does I/O.
	Capabilities() Capabilities
	// Schema returns the config schema. It never does I/O; the same pointer
	// may be returned on every call and must not be modified.
	Schema() *config.Schema
	// Acquire allocates a sandbox (sandbox drivers) or opens a session on the
	// host (host drivers). cfg has been normalized by Schema and its secrets
	// resolved to values. The context's deadline is the startup budget; on
	// cancellation Acquire returns promptly with an error wrapping ctx.Err().
	//
	// A driver never changes a config it is given, here or in any optional
	// method, nor any map or slice in it: the caller may share it (the
	// lease manager passes a lease record's own config when it holds no
	// secret to resolve). The conformance suite checks Acquire, Exec and
	// Release.
	Acquire(ctx context.Context, cfg config.Config, req AcquireRequest) (Sandbox, error)
}

// AcquireRequest carries what the lease layer knows about one acquisition.
// The zero AcquireRequest acquires a sandbox for no lease: no labels of
// berth's (so no sweep finds it by label: the caller must release it),
// the config's workspace, no runner; a host driver's session then gets a
// lease directory of its own.
type AcquireRequest struct {
	// LeaseID is the berth lease id the sandbox is acquired for. Host
	// drivers may derive state from it that another process finds again
	// (the ssh driver's runner directory), so two live sandboxes of one
	// target must not share it. Default "": none.
	LeaseID string
	// Labels are attached to the sandbox at the provider where the provider
	// has labels (sandbox drivers), so that sweeps find sandboxes by them.
	// Default none.
	Labels map[string]string
	// Workspace is an optional working directory hint for host drivers.
	// Default "": the config's working directory.
	Workspace string
	// Allocated, if not nil, is called once, as soon as the provider has
	// assigned the sandbox's provider lease id and before Acquire waits for
	// it to start (LEASE-2, LEASE-4), with Acquire's context (its values and
	// cancellation; the callback writes to a store and may block), and
	// never after Acquire has returned. If it returns an error, Acquire
	// destroys the sandbox (best effort) and returns that error. Default
	// nil: nothing is told.
	Allocated func(ctx context.Context, providerLeaseID string) error
	// Runner, if not nil, says the sandbox will host berth's runner
	// (RunnerHost). A driver that must prepare for it at creation does so
	// (Docker mounts the binary and the ingress directory). A driver that
	// cannot host a runner for this config refuses before allocating
	// anything, with an error wrapping ErrUnsupported that names
	// runner_ingress. Default nil: no runner.
	Runner *RunnerSpec
	// Warm says the sandbox will wait idle before its first command (a
	// warm-pool member): a driver may prepare ahead, within Acquire, what
	// that first command needs, so that it starts sooner (Docker starts
	// the exec that will run it). Best effort: a preparation that fails
	// or is gone when the command comes changes nothing but its speed.
	// Default false.
	Warm bool
}

// Sandbox is one acquired lease target. It is safe for concurrent use: many
// Execs may run at once. After Release, Exec returns ErrReleased.
type Sandbox interface {
	// ID returns the provider lease id: stable, and resumable by Resumer
	// where the driver supports it.
	ID() string
	// Exec runs a bounded command and returns its output and exit status. A
	// non-zero exit is not an error. On cancellation the whole process tree
	// is ended and Exec returns an error wrapping ctx.Err().
	Exec(ctx context.Context, cmd Command) (*Result, error)
	// Release ends the lease with the given disposition. The Receipt is what
	// the provider confirmed; see Receipt.Proves (LEASE-7).
	Release(ctx context.Context, d Disposition) (Receipt, error)
}

// Command is one process to run in a sandbox.
type Command struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH.
	// Drivers that only take a command string quote Argv for a POSIX shell.
	Argv []string
	// Env adds variables to the sandbox's environment.
	Env map[string]string
	// Dir is the working directory; "" means the sandbox's default.
	Dir string
	// Stdin, if not nil, is copied to the process's standard input.
	Stdin io.Reader
	// OutputLimit caps the bytes kept of stdout and of stderr each by Exec;
	// 0 means 1 MiB. Output beyond it is discarded and
	// Result.Truncated is set.
	OutputLimit int
}

// defaultOutputLimit is the per-stream output cap of Exec when
// Command.OutputLimit is 0: 1 MiB.
const defaultOutputLimit = 1 << 20

// Limit returns the effective output limit of c.
func (c Command) Limit() int {
	if c.OutputLimit <= 0 {
		return defaultOutputLimit
	}
	return c.OutputLimit
}

// Result is the outcome of a completed Exec.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int    // -1 when the process was killed by a signal
	Signal   string // signal name ("KILL", "TERM") when killed by one, else ""
	// Truncated reports that stdout or stderr exceeded the output limit.
	Truncated bool
	Duration  time.Duration
}

// Disposition says what Release does with a sandbox.
type Disposition int

const (
	// Keep leaves the sandbox running (a retained lease).
	Keep Disposition = iota
	// Stop stops the sandbox and keeps it resumable (host drivers: ends the session).
	Stop
	// Destroy removes the sandbox at the provider (host drivers: ends the session).
	Destroy
)

// String returns "keep", "stop" or "destroy".
func (d Disposition) String() string {
	switch d {
	case Keep:
		return "keep"
	case Stop:
		return "stop"
	case Destroy:
		return "destroy"
	default:
		return fmt.Sprintf("disposition(%d)", int(d))
	}
}

// MarshalText implements encoding.TextMarshaler.
func (d Disposition) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Disposition) UnmarshalText(b []byte) error {
	for _, v := range []Disposition{Keep, Stop, Destroy} {
		if v.String() == string(b) {
			*d = v
			return nil
		}
	}
	return fmt.Errorf("drivers: unknown disposition %q", b)
}

// State is a sandbox state as a provider reported it; "" when the
// provider reported none the driver knows.
type State string

// The states a Receipt or SandboxInfo reports.
const (
	StateStarting  State = "starting"
	StateRunning   State = "running"
	StateStopped   State = "stopped"
	StateDestroyed State = "destroyed"
	StateError     State = "error"
)

// Receipt is what the provider confirmed about a sandbox after Release.
type Receipt struct {
	// ProviderLeaseID is the sandbox the confirmation is about.
	ProviderLeaseID string `json:"providerLeaseId"`
	// State is the state the provider reported after the release.
	State State `json:"state"`
	// Confirmed is true only when the driver read the state back from the
	// provider (or observed the process end) after asking for the change;
	// "stop accepted" is not confirmation.
	Confirmed bool `json:"confirmed"`
	// ConfirmedAt is when the state was read back.
	ConfirmedAt time.Time `json:"confirmedAt,omitzero"`
	// Evidence is a short human-readable note of how it was confirmed
	// ("inspect: container not found", "GET /sandbox/x: 404"); never a secret.
	Evidence string `json:"evidence,omitempty"`
	// EvidenceKind names what the confirmation stands on (PRP-6):
	// EvidenceProvider for a provider's read-back, EvidenceCgroup or
	// EvidenceTagScan for a host driver's own check; EvidenceNone for a
	// keep. A confirmed receipt that names none is taken as the
	// provider's (Confirmed means read back from the provider);
	// EvidenceRunnerAttested never proves a release (Proves).
	EvidenceKind EvidenceKind `json:"evidenceKind,omitempty"`
}

// Proves reports whether r is proof that the sandbox providerLeaseID reached
// the state that disposition d asks for (LEASE-7): confirmed by the provider,
// for the same provider lease id, and stopped (Stop) or destroyed (Destroy).
// Keep needs no proof. A destroyed sandbox also satisfies Stop. A receipt
// that stands on the runner's attestation alone proves nothing.
func (r Receipt) Proves(providerLeaseID string, d Disposition) bool {
	if d == Keep {
		return true
	}
	if !r.Confirmed || r.ProviderLeaseID == "" || r.ProviderLeaseID != providerLeaseID || r.EvidenceKind == EvidenceRunnerAttested {
		return false
	}
	switch d {
	case Stop:
		return r.State == StateStopped || r.State == StateDestroyed
	case Destroy:
		return r.State == StateDestroyed
	}
	return false
}
