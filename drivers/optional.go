package drivers

import (
	"github.com/berthdev/berth/drivers/config"

	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/berthdev/berth/images"
)

// Resumer is an optional interface that may be implemented by a Driver
// (capability CapReattach, and CapReuse when the driver declares it too).
// Resume returns a handle to the recorded sandbox providerLeaseID, from
// any process, and waits until it runs within the context's deadline; a
// driver that declares CapReuse also starts it when it is stopped. It
// returns an error wrapping errcode.ErrNotFound when the provider has no
// such sandbox. If a Driver does not implement Resumer, its leases are
// reopened only by the process that acquired them, and reusable lease
// policies and warm pools are refused for it.
type Resumer interface {
	Resume(ctx context.Context, cfg config.Config, providerLeaseID string) (Sandbox, error)
}

// SandboxInfo describes a sandbox as a Lister reports it.
type SandboxInfo struct {
	ProviderLeaseID string            `json:"providerLeaseId"`
	Labels          map[string]string `json:"labels,omitempty"`
	State           State             `json:"state"`
}

// Lister is an optional interface that may be implemented by a Driver
// (capability CapList). List returns every sandbox at the provider that
// carries all of the given labels, destroyed ones excluded. If a Driver does
// not implement Lister, orphan sweeps skip its environments.
type Lister interface {
	List(ctx context.Context, cfg config.Config, labels map[string]string) ([]SandboxInfo, error)
}

// Destroyer is an optional interface that may be implemented by a Driver
// (capability CapDestroyByID). Destroy removes the sandbox providerLeaseID
// without a live handle and returns the provider's confirmation. Destroying a
// sandbox that is already gone succeeds with a confirmed StateDestroyed
// receipt. If a Driver does not implement Destroyer, cleanups that lost their
// handle stay pending until an operator acts.
type Destroyer interface {
	Destroy(ctx context.Context, cfg config.Config, providerLeaseID string) (Receipt, error)
}

// TemplateDeleter is an optional interface that may be implemented by a
// Driver (capability CapTemplateDelete). DeleteTemplate removes a captured
// image at the provider and returns the provider's confirmation: a Receipt
// whose ProviderLeaseID is empty, whose State is StateDestroyed and which is
// Confirmed only when the driver read back from the provider that the
// template is gone (Evidence says how: "inspect image: not found",
// "GET /snapshots/x: 404"). Deleting a template that is already gone
// succeeds with a confirmed receipt. A template the provider refuses to
// delete because something still uses it is an error wrapping ErrConflict,
// never a forced removal. If a Driver does not implement it, revoking a
// template only disables it in berth.
type TemplateDeleter interface {
	DeleteTemplate(ctx context.Context, cfg config.Config, id images.Identity) (Receipt, error)
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

// TerminalRequest opens an interactive session. The zero TerminalRequest
// opens the sandbox's login shell in its default directory, with no added
// environment, the driver's default window size and TERM xterm-256color.
type TerminalRequest struct {
	Argv []string          // default: the sandbox's login shell
	Env  map[string]string // added to the session's environment; default none
	Dir  string            // default: the sandbox's default directory
	// Rows and Cols are the window size; 0 (either) leaves the driver's
	// default (24x80 where the driver sets one). Resize changes it later.
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

// CaptureRequest names a captured image. The zero CaptureRequest captures
// under the driver's default name ("template" where a name is derived)
// with no labels of the caller's.
type CaptureRequest struct {
	// Name is a human-readable name for the template; providers may derive
	// a repository or snapshot name from it. Default "": the driver's
	// default name.
	Name string
	// Labels are added to the captured image where the provider has
	// labels (Docker); providers without them ignore them. Default none.
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
// The zero RunnerSpec names none: Validate refuses it, and so does every
// driver's HostRunner, before anything is installed.
type RunnerSpec struct {
	// Binary is the path, on the berth host, of a static Linux runner
	// binary for the sandbox's architecture that takes the flags of
	// cmd/berth-runner (--controller, --lease, --ticket-file, --state-dir).
	Binary string `json:"binary"`
	// SHA256 is the lowercase hex SHA-256 of Binary's contents. Installs
	// are keyed by it: a sandbox that already holds this sum copies nothing.
	SHA256 string `json:"sha256"`
	// Arch is the GOARCH the binary is built for ("amd64", "arm64"), as
	// its ELF header says (runnerbin.Spec reads it); ""
	// when unknown. RunnerSet keys by it.
	Arch string `json:"arch,omitempty"`
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

// RunnerSet names berth's runner binaries, one per architecture, so that
// one lease manager serves targets of every architecture it names; a
// target of another architecture is refused before anything is allocated
// (lease.AcquireRequest.Runner).
type RunnerSet struct {
	// Binaries maps a GOARCH ("amd64", "arm64") to the binary built for
	// it.
	Binaries map[string]RunnerSpec
	// Build, if not nil, returns the binary for an architecture Binaries
	// has none for (envctl builds one from the module's source); it is
	// called before anything is allocated, and its error refuses the
	// acquisition. The set calls it at most once per architecture and
	// keeps what it returned.
	Build func(ctx context.Context, arch string) (RunnerSpec, error)

	mu    sync.Mutex
	built map[string]RunnerSpec
}

// RunnerSetOf returns a set of specs keyed by their Arch (RunnerSpec.Arch,
// which runnerbin.Spec reads from the binary). It panics on a spec
// without Arch or two for one architecture: a programmer's error.
func RunnerSetOf(specs ...RunnerSpec) *RunnerSet {
	s := &RunnerSet{Binaries: map[string]RunnerSpec{}}
	for _, spec := range specs {
		if spec.Arch == "" {
			panic(fmt.Sprintf("drivers: RunnerSetOf: binary %q has no architecture", spec.Binary))
		}
		if _, dup := s.Binaries[spec.Arch]; dup {
			panic(fmt.Sprintf("drivers: RunnerSetOf: two binaries for %s", spec.Arch))
		}
		s.Binaries[spec.Arch] = spec
	}
	return s
}

// validate reports whether every binary of s is well-formed
// (RunnerSpec.Validate) and keyed by a GOARCH that agrees with its Arch
// where that is known, naming the architecture that is not, and whether s
// names a binary or a Build at all.
func (s *RunnerSet) validate() error {
	if len(s.Binaries) == 0 && s.Build == nil {
		return errors.New("runner set: no binary and no Build")
	}
	for _, arch := range s.arches() {
		spec := s.Binaries[arch]
		if !validGOARCH(arch) {
			return fmt.Errorf("runner set: architecture %q: want a GOARCH such as amd64 or arm64", arch)
		}
		if spec.Arch != "" && spec.Arch != arch {
			return fmt.Errorf("runner set: the %s binary %q is built for %s", arch, spec.Binary, spec.Arch)
		}
		if err := spec.Validate(); err != nil {
			return fmt.Errorf("runner set: %s: %w", arch, err)
		}
	}
	return nil
}

// arches returns the architectures s has a binary for, sorted (what Build
// may add is not among them).
func (s *RunnerSet) arches() []string {
	return slices.Sorted(maps.Keys(s.Binaries))
}

// For returns the binary of s for arch, its Arch filled in: from Binaries,
// else from Build. When arch is "" (the target's architecture is not
// known before allocation) and Binaries holds exactly one binary, it
// returns that one: the driver checks at install whether it fits.
// Otherwise an error wrapping ErrUnsupported names the architecture and
// the ones s has; Build's error is returned wrapped. A set that names no
// binary and no Build, a malformed binary (RunnerSpec.Validate) or one
// keyed by a GOARCH other than its Arch is an error naming it.
func (s *RunnerSet) For(ctx context.Context, arch string) (RunnerSpec, error) {
	if err := s.validate(); err != nil {
		return RunnerSpec{}, err
	}
	if arch == "" {
		if len(s.Binaries) == 1 {
			for a, spec := range s.Binaries {
				spec.Arch = a
				return spec, nil
			}
		}
		return RunnerSpec{}, fmt.Errorf("runner set: the target's architecture is not known before allocation and the set names %d binaries (%s): name one: %w",
			len(s.Binaries), cmp.Or(strings.Join(s.arches(), ", "), "none"), ErrUnsupported)
	}
	if spec, ok := s.Binaries[arch]; ok {
		spec.Arch = arch
		return spec, nil
	}
	if s.Build == nil {
		return RunnerSpec{}, fmt.Errorf("runner set: no runner binary for architecture %s (the set has %s): %w",
			arch, cmp.Or(strings.Join(s.arches(), ", "), "none"), ErrUnsupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec, ok := s.built[arch]; ok {
		return spec, nil
	}
	spec, err := s.Build(ctx, arch)
	if err != nil {
		return RunnerSpec{}, fmt.Errorf("runner set: the runner binary for %s: %w", arch, err)
	}
	if spec.Arch != "" && spec.Arch != arch {
		return RunnerSpec{}, fmt.Errorf("runner set: Build returned the binary %q for %s, not %s", spec.Binary, spec.Arch, arch)
	}
	spec.Arch = arch
	if err := spec.Validate(); err != nil {
		return RunnerSpec{}, fmt.Errorf("runner set: %s: %w", arch, err)
	}
	if s.built == nil {
		s.built = map[string]RunnerSpec{}
	}
	s.built[arch] = spec
	return spec, nil
}

func validGOARCH(a string) bool {
	if a == "" || len(a) > 16 {
		return false
	}
	return strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
}

// ArchReporter is an optional interface that may be implemented by a
// Driver. RunnerArch returns the GOARCH ("amd64", "arm64") of the
// sandboxes Acquire would create for cfg (normalized, secrets resolved),
// without allocating anything (the local host's own; the Docker engine's),
// so that the lease manager picks the runner binary of a RunnerSet before
// a sandbox exists. If a Driver does not implement it, the architecture
// is unknown before allocation: a set of one binary is used as it is (the
// driver checks it at install), a set of several is refused.
type ArchReporter interface {
	RunnerArch(ctx context.Context, cfg config.Config) (string, error)
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
	// sandbox ("unix:/run/berth/prp.sock", for an ingress that sends no IP
	// traffic), or an absolute http(s) URL.
	Endpoint() string
	// Launch starts the installed runner detached from the driver's
	// connection (in its own session, its output to a log file in its
	// state directory), so that a dropped connection does not end it, and
	// returns once it is started. The runner dials Endpoint.
	Launch(ctx context.Context, req RunnerLaunch) error
	// LogTail returns at most the last limit bytes (limit is clamped to
	// 1..65536, 64 KiB: driverkit.ClampLogTail) of the log of the runner last launched through
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
	NarrowedBy(cfg config.Config) Set
}

// ImageLister is an optional interface that may be implemented by a
// Driver whose provider keeps the images its schema's ImageField names
// (Daytona's snapshots, named there by id), so that an operator picks one
// by name instead of pasting an id. ListImages asks the provider, with cfg
// (normalized, secrets resolved), for those whose name contains match
// (case-insensitively; "" for all): at most 200, the most recently used
// first. It is an explicit action of an operator, never part of a listing,
// and allocates nothing. If a Driver does not implement it, hosts offer no
// picker. environment's Catalog.ListImages calls it.
type ImageLister interface {
	ListImages(ctx context.Context, cfg config.Config, match string) ([]ImageChoice, error)
}

// ImageChoice is one image a provider keeps, as ImageLister lists it.
type ImageChoice struct {
	// Value is what the schema's ImageField takes to name it (Daytona:
	// the snapshot's id).
	Value string `json:"value"`
	// Name is the provider's name for it.
	Name string `json:"name"`
	// Source is the image it was built from, or "".
	Source string `json:"source,omitempty"`
	// State is the provider's word for its state ("active", "pending",
	// "inactive", …).
	State string `json:"state"`
	// Usable reports whether a sandbox can be created from it now.
	Usable bool `json:"usable"`
}

// PluginReporter is an optional interface that may be implemented by a
// Driver served by a plugin in its own process (drivers/plugin).
// PluginInfo returns, without I/O, the plugin's binary, version and pin,
// which listings show (DriverInfo.Plugin). If a Driver does not implement
// it, the driver is compiled into the host.
type PluginReporter interface {
	PluginInfo() PluginInfo
}

// PluginInfo describes the plugin that serves a driver.
type PluginInfo struct {
	// Binary is the path of the plugin's binary on the berth host.
	Binary string `json:"binary"`
	// Version is the plugin's own version, as its manifest records it.
	Version string `json:"version"`
	// SHA256 is the operator's pin: the binary's SHA-256, lowercase hex.
	SHA256 string `json:"sha256"`
}

// AvailabilityReporter is an optional interface that may be implemented by a
// Driver. Availability reports, without I/O, why the driver cannot be used
// now (credentials missing from its options, disabled), or nil. If a Driver
// does not implement it, a registered driver is available.
type AvailabilityReporter interface {
	Availability() error
}
