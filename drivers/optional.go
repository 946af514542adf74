package drivers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/berthdev/berth/images"
)

// Resumer is an optional interface that may be implemented by a Driver
// (capability CapReuse). Resume returns a handle to the recorded sandbox
// providerLeaseID, starting it if it is stopped, and waits until it runs
// within the context's deadline. It returns an error wrapping ErrNotFound
// when the provider has no such sandbox. If a Driver does not implement
// Resumer, reusable lease policies are refused for it.
type Resumer interface {
	Resume(ctx context.Context, cfg Config, providerLeaseID string) (Sandbox, error)
}

// SandboxInfo describes a sandbox as a Lister reports it.
type SandboxInfo struct {
	ProviderLeaseID string            `json:"providerLeaseId"`
	Labels          map[string]string `json:"labels,omitempty"`
	State           State             `json:"state"`
	CreatedAt       time.Time         `json:"createdAt,omitzero"`
}

// Lister is an optional interface that may be implemented by a Driver
// (capability CapList). List returns every sandbox at the provider that
// carries all of the given labels, destroyed ones excluded. If a Driver does
// not implement Lister, orphan sweeps skip its environments.
type Lister interface {
	List(ctx context.Context, cfg Config, labels map[string]string) ([]SandboxInfo, error)
}

// Destroyer is an optional interface that may be implemented by a Driver
// (capability CapDestroyByID). Destroy removes the sandbox providerLeaseID
// without a live handle and returns the provider's confirmation. Destroying a
// sandbox that is already gone succeeds with a confirmed StateDestroyed
// receipt. If a Driver does not implement Destroyer, cleanups that lost their
// handle stay pending until an operator acts.
type Destroyer interface {
	Destroy(ctx context.Context, cfg Config, providerLeaseID string) (Receipt, error)
}

// TemplateDeleter is an optional interface that may be implemented by a
// Driver (capability CapTemplateDelete). DeleteTemplate removes a captured
// image at the provider; deleting one that is gone succeeds. If a Driver does
// not implement it, revoking a template only disables it in berth.
type TemplateDeleter interface {
	DeleteTemplate(ctx context.Context, cfg Config, id images.Identity) error
}

// ImageReporter is an optional interface that may be implemented by a Sandbox
// (capability CapImageIdentity). ImageIdentity reads the identity of the
// image the live sandbox runs from the provider (IMG-3); it never echoes the
// configured reference back. If a Sandbox does not implement it, the live
// image is unknown and qualification is not recorded.
type ImageReporter interface {
	ImageIdentity(ctx context.Context) (images.Identity, error)
}

// Process is a process started by StreamExecer.Start.
type Process interface {
	// Wait blocks until the process ends and its output has been written,
	// and returns its exit status (Stdout/Stderr of the Result are empty).
	// If ctx ends first, Wait returns promptly an error wrapping ctx.Err()
	// and leaves the process running: Wait may be called again, and
	// cancelling the context given to Start (or Signal) ends the process
	// tree.
	Wait(ctx context.Context) (*Result, error)
	// Signal sends sig, one of driverkit.Signals (in a form
	// driverkit.ParseSignal reads), to the whole process group; another
	// name is an error wrapping ErrUnsupported. Signalling a process that already ended is not an
	// error.
	Signal(ctx context.Context, sig string) error
	// CloseStdin closes the process's standard input.
	CloseStdin() error
}

// StreamExecer is an optional interface that may be implemented by a Sandbox
// (capability CapStreamExec). Start runs cmd and streams its output to stdout
// and stderr as it is produced; either may be nil to discard. cmd.Stdin, if
// set, is copied to the process. If a Sandbox does not implement it, only
// bounded Exec is available.
type StreamExecer interface {
	Start(ctx context.Context, cmd Command, stdout, stderr io.Writer) (Process, error)
}

// TerminalRequest opens an interactive session.
type TerminalRequest struct {
	Argv []string // default: the sandbox's login shell
	Env  map[string]string
	Dir  string
	Rows int
	Cols int
	Term string // TERM; default "xterm-256color"
}

// TerminalSession is a live PTY. Read returns the terminal's output, Write
// sends keystrokes. Close ends the session and the processes behind it.
type TerminalSession interface {
	io.ReadWriteCloser
	// Resize changes the window size.
	Resize(ctx context.Context, rows, cols int) error
	// Wait blocks until the session's process ends and returns its exit
	// status. If ctx ends first, Wait returns promptly an error wrapping
	// ctx.Err() and leaves the session open; Close ends it.
	Wait(ctx context.Context) (*Result, error)
}

// Terminal is an optional interface that may be implemented by a Sandbox
// (capability CapTerminal). If a Sandbox does not implement it, interactive
// setup is refused for the driver.
type Terminal interface {
	OpenTerminal(ctx context.Context, req TerminalRequest) (TerminalSession, error)
}

// CaptureRequest names a captured image.
type CaptureRequest struct {
	// Name is a human-readable name for the template; providers may derive
	// a repository or snapshot name from it.
	Name   string
	Labels map[string]string
}

// Capturer is an optional interface that may be implemented by a Sandbox
// (capability CapTemplateCapture). Capture saves the sandbox's current state
// as a new image and returns its immutable identity. If a Sandbox does not
// implement it, custom-image setup is refused for the driver.
type Capturer interface {
	Capture(ctx context.Context, req CaptureRequest) (images.Identity, error)
}

// RunnerSpec names berth's runner binary for a sandbox that will host it.
type RunnerSpec struct {
	// Binary is the path, on the berth host, of a static Linux runner
	// binary for the sandbox's architecture that takes the flags of
	// examples/runner (--controller, --lease, --ticket-file, --state-dir).
	Binary string
	// SHA256 is the lowercase hex SHA-256 of Binary's contents. Installs
	// are keyed by it: a sandbox that already holds this sum copies nothing.
	SHA256 string
}

// Validate reports whether s names an absolute binary path and a
// well-formed sum, naming the field that is not.
func (s RunnerSpec) Validate() error {
	if s.Binary == "" || s.Binary[0] != '/' {
		return fmt.Errorf("runner spec: binary %q: %w", s.Binary, errors.New("want an absolute path"))
	}
	if len(s.SHA256) != 64 || strings.Trim(s.SHA256, "0123456789abcdef") != "" {
		return fmt.Errorf("runner spec: sha256 %q: %w", s.SHA256, errors.New("want 64 lowercase hex digits"))
	}
	return nil
}

// RunnerLaunch is what RunnerIngress.Launch needs to start the runner.
type RunnerLaunch struct {
	// Lease is the berth lease id the ticket was minted for (--lease).
	Lease string
	// Ticket is the one-use bootstrap ticket. The driver writes it to a
	// file of mode 0600 in the sandbox, which the runner removes as soon
	// as it has read it (--ticket-file). It never appears in an argv, an
	// environment, a log or an error.
	Ticket string
	// Env is added to the runner's environment (the lease layer's process
	// tag, for example); the runner's tasks inherit it.
	Env map[string]string
}

// RunnerHost is an optional interface that may be implemented by a Sandbox
// (capability CapRunnerIngress): the sandbox can host berth's runner and
// carry its connections back to the berth host. A Sandbox that must be
// prepared for it when it is created (Docker's bind mounts) is acquired
// with AcquireRequest.Runner. If a Sandbox does not implement it, runner
// execution is refused for the driver.
type RunnerHost interface {
	// HostRunner installs the runner of spec in the sandbox, once per
	// SHA256 (a second call with the same sum copies nothing), and opens
	// the ingress through which it reaches the host. A sandbox has at most
	// one open ingress: HostRunner while one is open fails. spec must be
	// the one the sandbox was acquired with (AcquireRequest.Runner) where
	// the driver prepares at creation.
	HostRunner(ctx context.Context, spec RunnerSpec) (RunnerIngress, error)
}

// UnixScheme prefixes a controller URL that names a unix socket rather
// than a host: "unix:/run/berth/prp.sock", the form of
// RunnerIngress.Endpoint for an ingress that sends no IP traffic. The
// runner (prp/runner) reads it in its --controller flag.
const UnixScheme = "unix:"

// MaxRunnerLogTail is the most RunnerIngress.LogTail returns.
const MaxRunnerLogTail = 64 << 10

// RunnerIngress is a runner installed in a sandbox and its way back to
// the berth host. As a net.Listener it yields, on the host, each
// connection a runner in the sandbox made to Endpoint; the host serves the
// controller (an http.Handler) on it. Its lifetime is the lease's: it
// outlives the driver's own connections (an SSH forward is re-established
// at the same Endpoint) and ends when it is closed or the sandbox is
// released. Closing it stops no runner.
type RunnerIngress interface {
	net.Listener
	// Endpoint is the controller URL a runner in the sandbox dials, as
	// its --controller flag: "unix:" and an absolute socket path in the
	// sandbox (UnixScheme), or an absolute http(s) URL.
	Endpoint() string
	// Launch starts the installed runner detached from the driver's
	// connection (in its own session, its output to a log file in its
	// state directory), so that a dropped connection does not end it, and
	// returns once it is started. The runner dials Endpoint.
	Launch(ctx context.Context, req RunnerLaunch) error
	// LogTail returns at most the last limit bytes (limit is clamped to
	// 1..MaxRunnerLogTail) of the log of the runner last launched through
	// this ingress: what the runner wrote before it failed to reach the
	// host (a wrong architecture, a crash, a refused ticket). It is nil
	// when nothing was launched or nothing logged yet. The log never holds
	// the ticket. It is raw bytes from the sandbox: a caller that shows it
	// keeps printable text only. It honours ctx and works after Close.
	LogTail(ctx context.Context, limit int) ([]byte, error)
}

// ConfigNarrower is an optional interface that may be implemented by a
// Driver whose effective capabilities depend on its config (CAP-2:
// narrowing by config). NarrowedBy returns, without I/O, the declared
// capabilities that cfg (normalized) takes away; Docker narrows
// runner_ingress away for an engine that does not share this host's
// filesystem. A driver that implements it refuses, at Acquire, what the
// config narrowed away. If a Driver does not implement it, no config
// narrows it. ConfigNarrowing reads it.
type ConfigNarrower interface {
	NarrowedBy(cfg Config) Set
}

// AvailabilityReporter is an optional interface that may be implemented by a
// Driver. Availability reports, without I/O, why the driver cannot be used
// now (credentials missing from its options, disabled), or nil. If a Driver
// does not implement it, a registered driver is available.
type AvailabilityReporter interface {
	Availability() error
}
