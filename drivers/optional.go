package drivers

import (
	"context"
	"io"
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
	// Signal sends sig, one of Signals (in a form ParseSignal reads), to
	// the whole process group; another name is an error wrapping
	// ErrUnsupported. Signalling a process that already ended is not an
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

// RunnerIngress is an optional interface that may be implemented by a
// Sandbox (capability CapRunnerIngress). ControllerURL maps a controller URL
// reachable from the berth host (for example ws://127.0.0.1:PORT/prp) to the
// URL a runner inside the sandbox dials to reach it. If a Sandbox does not
// implement it, runner execution is refused for the driver.
type RunnerIngress interface {
	ControllerURL(ctx context.Context, hostURL string) (string, error)
}

// AvailabilityReporter is an optional interface that may be implemented by a
// Driver. Availability reports, without I/O, why the driver cannot be used
// now (credentials missing from its options, disabled), or nil. If a Driver
// does not implement it, a registered driver is available.
type AvailabilityReporter interface {
	Availability() error
}

// Closer (io.Closer) is an optional interface that may be implemented by a
// Driver. Close releases what the driver holds for its whole life (engine
// clients, pooled connections); sandboxes obtained before must not be used
// afterwards. Registry.Close calls it once per driver. If a Driver does not
// implement io.Closer, it holds nothing that needs closing.
type Closer = io.Closer
