// Package leasehook carries the lease package's hooks that only berth's
// own packages call (CONVENTIONS 24): the Manager's constructor with the
// collaborators berth.New wires into it (the runner controller's task
// hook, the secret store and keeper, the instance settings, the runner
// binaries, the environments a sweep searches), its Close, its internal
// knobs (internal/leasetune), and the calls of a Handle that only the
// runner controller, the prober and the templates service make. No host or
// driver author needs them: a host gets its Manager from berth.New
// (System.Leases), which System.Close closes, and reaches the rest through
// the System's services (Runners, Prober, Templates).
//
// Package lease sets every variable in its init, so they are never nil in
// a program that imports lease. The arguments typed any are lease's own
// types (this package sits below lease and cannot name them); each
// variable says which, and a wrong type panics.
package leasehook

import (
	"context"
	"errors"
	"log/slog"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasetune"
)

// TaskStopper is the lease manager's hook into the runner protocol
// (Sources.Tasks: the value the runner controller's New returns next to
// its Controller, of an unexported type, so that no holder of the
// Controller can stop a lease's tasks without the Authorizer). Before a
// release or a cleanup stops or destroys a lease's sandbox, the manager
// calls StopTasks: every task of every runner session of the lease must be
// stopped and its stop verified (PRP-6). The manager calls it only after
// it authorized the release (ActionLease) or the sweep (ActionSweep); it
// is not an entry point for principals. It calls it only for a lease
// acquired for a runner (Lease.Runner not nil): a TaskStopper creates the
// sessions whose tasks a release stops (the holder's) on such leases only,
// so the release of any other lease asks it, and its store, nothing.
//
// The controller's TaskStopper also runs Handle.Run's and
// Handle.Reattach's tasks and starts the runners of runner pools' members
// (methods the lease package looks for by type assertion).
type TaskStopper interface {
	// StopTasks stops every task of every runner session of lease and
	// verifies each stop. A lease without runner sessions reports zero
	// sessions and a nil error. An incomplete proof, a refused stop or a
	// runner that does not answer before ctx ends is an error naming the
	// sessions and tasks; the lease then stays pending_cleanup with it.
	StopTasks(ctx context.Context, lease string) (TaskStopReport, error)
	// LeaseEnded says that this process no longer holds the lease's
	// sandbox (it was released, kept, or another manager ended it): what
	// serves the lease's runners from this process (an ingress server) is
	// closed. It stops no task and does not block.
	LeaseEnded(lease string)
}

// TaskStopReport is what a TaskStopper proved.
type TaskStopReport struct {
	// Sessions counts the runner sessions of the lease; Tasks the tasks
	// whose stop is verified (now or by an earlier stop).
	Sessions, Tasks int
	// Evidence says how the stops were verified, for the lease's cleanup
	// receipt (Lease.CleanupEvidence).
	Evidence string
	// EvidenceKind names what the stops stand on: a runner's proofs are
	// drivers.EvidenceRunnerAttested, which never ends a lease alone (the
	// manager still needs the sandbox's own proof or the host check).
	EvidenceKind drivers.EvidenceKind
}

// Sources are what a lease Manager reads and acts through. Store is
// required; every other field has a default.
type Sources struct {
	// Store keeps the lease records: a lease.Store. Required.
	Store any
	// Drivers are the registered drivers the leases' sandboxes come from.
	Drivers *drivers.Registry
	// Assignments reads saved environments and bindings for Acquire (by
	// environment id or through a scope), and its Authorizer (the
	// catalog's) decides every acquire, release, read and sweep (AUTH-1).
	// nil: Acquire refuses saved environments, and the other calls decide
	// with authz.DefaultPolicy.
	Assignments *environment.Assignments
	// Options are the host's knobs: a *lease.Options (berth.Options.Leases),
	// or nil for the defaults.
	Options any
	// Tasks, if not nil, is the runner protocol's hook: it stops and
	// verifies the runner tasks of a lease before its release or cleanup
	// stops or destroys the sandbox (PRP-6). An unproven stop leaves the
	// lease pending_cleanup with the reason; the cleanup that retries it
	// asks again and, if the runner still cannot prove the stop, relies on
	// the sandbox's own proof (a confirmed stop or destroy, or the host
	// check of a host lease). nil: the leases have no runner tasks to stop,
	// Handle.Run fails as unsupported and runner pools are not refilled.
	Tasks TaskStopper
	// Clock measures budgets, expiry, claims and heartbeats: a clock.Fake
	// runs the manager's time in step. Default the wall clock.
	Clock clock.Clock
	// Logger receives operational messages (never secrets). Default
	// discard; berth.New passes berth.Options.Logger.
	Logger *slog.Logger
	// Secrets returns the value of a secret reference from the host's
	// secret store (environment.SecretStore.Get); its errors must not
	// contain the value. It resolves the secret references of environment
	// configs at acquire and again at cleanup time; lease records keep
	// references only. Default: none, so a config with a secret reference
	// fails with config.ErrCredentialsMissing.
	Secrets func(ctx context.Context, ref config.SecretRef) (string, error)
	// SecretKeeper, if not nil, records the secret references of every
	// lease record before it is written and releases them once the lease
	// is proven clean (released, expired or failed with nothing left), so
	// that a secret the catalog retired stays in the SecretStore until the
	// last lease that uses it is clean and sweeps always have the
	// credentials they need (CFG-7, LEASE-9). berth.New gives the catalog
	// the same keeper. Default nil: nothing is recorded.
	SecretKeeper envhook.SecretKeeper
	// SweepEnvironments, if not nil, lists the environments whose providers
	// a Sweep searches for orphans, and whose pools MaintainPools and
	// sweeps keep (berth.New: every saved environment). Default: every
	// environment that appears on a lease in the store (with the config
	// recorded on its newest lease).
	SweepEnvironments func(ctx context.Context) ([]*environment.Environment, error)
	// PoolRunners returns the runner binaries members of a runner pool
	// (environment.Pool.Runner) are prepared for; an acquisition for the
	// same binary adopts them. It is also the set of
	// AcquireRequest.WithRunner. Default nil: a runner pool's refill and a
	// WithRunner acquisition fail with an error wrapping
	// drivers.ErrUnsupported. berth.New sets it to System.RunnerSet.
	PoolRunners func() (*drivers.RunnerSet, error)
	// Settings reads the instance settings (CFG-9): while they disable
	// environments (or a pool's driver is a host driver under
	// managed-sandbox-only) no refill starts a member, and their quotas
	// limit acquisitions with lease.Options.Quotas (the stricter per
	// field). nil: refills read none, and only Options.Quotas limit.
	Settings instance.Reader
	// Ended, if not nil, is called after every release (Manager.Release,
	// Handle.Release) with the lease as the release left it (a
	// *lease.Lease, a copy), whatever its outcome: berth.New ends the
	// lease's workspace records there (package workspace). It must not
	// block long; it answers for no principal.
	Ended func(ctx context.Context, l any)
}

// ErrStartupBudget is the error an acquisition wraps when its sandbox did
// not start within the startup budget (LEASE-3): reason "startup_budget",
// code Timeout (what a host reads, errcode.ReasonOf). The prober maps it
// to its timeout code wherever it is in the chain.
var ErrStartupBudget error = &errcode.Error{Code: errcode.Timeout, Reason: "startup_budget", Err: errors.New("lease: startup budget exhausted")}

// MaxRunStdin is the most bytes of lease.Command.Stdin that Handle.Run
// sends with a task (1 MiB, documented at Command.Stdin): the runner gets
// its standard input whole, with the start command, and the runner
// controller refuses more.
const MaxRunStdin = 1 << 20

var (
	// New returns a *lease.Manager over src, and the manager's hook for
	// the catalog's blast radius: an envhook.UsageReporter (also an
	// environment.ReferenceClearer, with the archive and save hooks) that
	// lists the live leases of an environment, reading the live records
	// only and calling no provider (CAP-1), and drains or refills its
	// warm pool. It answers for no principal, so it is no method of the
	// Manager: the catalog authorizes BlastRadius and Delete before it
	// asks (berth.New gives it to the catalog).
	New func(src Sources) (mgr any, usage envhook.UsageReporter[environment.Usage])

	// Close stops the heartbeats of the host leases mgr (a *lease.Manager)
	// holds, releasing nothing: their claims then expire after three
	// heartbeats and other managers may end the sessions only by a check
	// on the host. It stops the background pool refills and waits for
	// them, draining no pool, and ends the goroutines parked for coalesced
	// acquisitions. The manager must not acquire afterwards. System.Close
	// calls it.
	Close func(mgr any) error

	// Tune calls f with the internal knobs of opts (a *lease.Options,
	// typically berth.Options.Leases), allocating them first: berth's own
	// tests run the manager in fake time and in step with it. A host
	// cannot name the knobs, and leaves them at their defaults.
	Tune func(opts any, f func(*leasetune.Knobs))

	// HostRunner installs the runner the lease of h (a *lease.Handle) was
	// acquired for (Lease.Runner) in its sandbox and opens the ingress
	// through which it reaches the host (drivers.RunnerHost); an error
	// wraps drivers.ErrUnsupported when the driver cannot host a runner or
	// the lease was acquired without one. The caller closes the ingress;
	// the runner it launches carries the lease's process tag
	// (BERTH_LEASE), so a host lease's cleanup finds it. The runner
	// controller's Attach calls it.
	HostRunner func(h any, ctx context.Context) (drivers.RunnerIngress, error)

	// Capture captures the filesystem of h's sandbox (h a *lease.Handle)
	// as a provider template (drivers.Capturer); an error wraps
	// drivers.ErrUnsupported when the driver cannot. templates.Service's
	// captures call it, after their checks and with their records.
	Capture func(h any, ctx context.Context, req drivers.CaptureRequest) (images.Identity, error)

	// OpenTerminal opens an interactive terminal in h's sandbox (h a
	// *lease.Handle; drivers.Terminal), with BERTH_LEASE in its
	// environment; an error wraps drivers.ErrUnsupported when the driver
	// has none. The setup sessions of templates.Service call it (IMG-5).
	OpenTerminal func(h any, ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error)

	// ImageIdentity reports the live image of h's sandbox (h a
	// *lease.Handle; drivers.ImageReporter); an error wraps
	// drivers.ErrUnsupported when the driver cannot report it. The prober
	// and the templates service call it.
	ImageIdentity func(h any, ctx context.Context) (images.Identity, error)

	// Files returns the file capability (drivers.Files) of h's sandbox
	// (h a *lease.Handle), narrowed as every capability of a Handle; an
	// error wraps drivers.ErrUnsupported when the driver has none. Package
	// workspace prepares and collects through it.
	Files func(h any) (drivers.Files, error)

	// Kind says whether the lease of h (a *lease.Handle) is a sandbox or a
	// host session: its driver's kind. The runner controller admits runners
	// by it (managed-sandbox-only refuses host drivers). A host looks the
	// driver up (System.Drivers().Lookup(Lease.Provider)).
	Kind func(h any) drivers.Kind

	// Isolation is the level the driver of h (a *lease.Handle) declares
	// for the lease's config (drivers.IsolationOf, no I/O). The runner
	// controller checks it against the minimum in force when a runner
	// attaches, so that a minimum raised after the acquisition holds for
	// the runs that start after it.
	Isolation func(h any) drivers.Isolation

	// Fingerprint returns the reuse fingerprint that a lease of env (on
	// driver d) acquired now records (Lease.Fingerprint, LEASE-4), with the
	// active template's identity as the image while the template applies
	// (IMG-8). It does no I/O; an identity value without a JSON encoding is
	// an error wrapping errcode.ErrInvalid. The hand-over service binds its
	// project auth checks to it, so that a template change is a config
	// change for them too.
	Fingerprint func(d drivers.Driver, env *environment.Environment) (string, error)

	// Draft returns req (a lease.AcquireRequest) set to acquire for an
	// unsaved config (a draft probe, PRB-4): driver and cfg, normalized by
	// the driver's schema (envhook.Draft returns both). It needs
	// authz.ActionProbe. The config may hold pasted secret values and the
	// request's Company may be empty. The write-ahead record is kept as
	// for every lease (LEASE-2), but without the config's secret fields,
	// so nothing secret is stored: a cleanup that must be retried later
	// runs without credentials, and stays pending_cleanup for an operator
	// if the driver needs them. Only the Ephemeral policy is allowed. The
	// result is a lease.AcquireRequest.
	Draft func(req any, driver string, cfg config.Config) any
)
