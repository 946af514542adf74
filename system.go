package berth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/handoverhook"
	"github.com/berthdev/berth/internal/instancehook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/probehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/runnerbin"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
	"github.com/berthdev/berth/workspace"
)

// Options configures New. The zero value (or nil) composes the embedded
// default: memory stores, an in-memory secret store, the local driver, and
// the default authorization policy.
type Options struct {
	// Stores are the stores of every package: the zero value for memory
	// stores (lost when the process ends), or every field set, as
	// store/sqlite's and store/postgres's DB.Stores return them. A Stores
	// with some fields set and others nil is refused with an error that
	// names the nil ones: a host's durable store never sits beside a memory
	// store it did not ask for (fill such fields from store.Memory()). New
	// neither opens nor closes them: the host closes its database after
	// the System.
	Stores store.Stores
	// Drivers are the drivers to register. Default: local.New(nil) only;
	// name the others (fake.New for tests and demos).
	Drivers []drivers.Driver
	// Secrets is the host's secret store. Nil with memory stores: an
	// in-memory one, whose secrets are lost when the process ends. Nil
	// with durable Stores (Stores.Durable: store/sqlite, store/postgres)
	// is refused, naming this field, unless MemorySecrets asks for the
	// in-memory store: after a restart no lease whose cleanup needs a
	// credential could be released or swept.
	Secrets environment.SecretStore
	// MemorySecrets lets durable Stores go with the in-memory secret store
	// when Secrets is nil (tests and demos whose secrets may be lost).
	// Default false: New refuses that combination.
	MemorySecrets bool
	// TestMode lets test-only drivers (fake) be saved as working targets
	// (CFG-4). Default false.
	TestMode bool
	// Protected, if not nil, returns a non-empty reason when env may never
	// be deleted (CFG-7: a host's managed local environment); a delete is
	// refused with that reason and the blast radius shows it. The instance
	// default is always protected. It must be quick and do no I/O the
	// delete may block on. Default: nothing else is protected.
	Protected func(ctx context.Context, env *environment.Environment) (reason string)
	// Authorizer decides every catalog, assignment and lease action
	// (AUTH-1). Default authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Logger receives library logs; never a secret. Default: discard.
	Logger *slog.Logger
	// Leases configures the lease manager (System.Leases): the
	// installation's InstanceID that labels every sandbox so that sweeps
	// find this instance's orphans, ClaimGrace, PruneAfter, Quotas and
	// ManualPoolRefill (see lease.Options for each default). Nil means
	// lease's defaults. The manager logs to Logger; its collaborators
	// (the secret store and keeper, the instance settings, the runner
	// controller and binaries, the saved environments) are New's to wire.
	Leases *lease.Options
	// Templates configures the custom images service (System.Templates):
	// the setup sessions' SessionTTL and SessionMaxTTL (default 30 minutes
	// and 4 hours). Nil means its defaults. It decides with Authorizer and
	// logs to Logger.
	Templates *templates.Options
	// RunnerKeys sign and verify the runners' connection tokens
	// (HMAC-SHA-256): the first signs, every one verifies, so keys can
	// rotate (put the new key first; drop the old one once no token it
	// signed can be alive, 15 minutes later). Each is at least 32 bytes.
	// Replicas that share Stores.Runners must pass the same keys. Default:
	// a random key of this process.
	RunnerKeys [][]byte
	// RunnerDir is the directory where berth's runner controller keeps
	// the output of tasks (chunk files per runner session, which
	// Stores.Runners indexes); replicas that share Stores.Runners share it
	// too. Default "": a directory New makes under os.TempDir and Close
	// removes.
	RunnerDir string
	// RunnerHeartbeat is how often a connected runner and the controller
	// ping each other; a side that hears nothing for three heartbeats
	// closes the connection, and the runner reconnects (to any replica)
	// and resumes. Default 10 seconds.
	RunnerHeartbeat time.Duration
	// RunnerMaxOutput caps the output bytes stored of one lease's runner
	// session, over all its tasks (lease.Command.OutputLimit caps a
	// task's share). Past it the output is counted and discarded and the
	// task's lease.Exit says Truncated; the task is not stopped. Default
	// 1 GiB.
	RunnerMaxOutput int64
	// RunnerMaxSessions is the ceiling on the runners connected to this
	// process at once (admission control): past it a runner that
	// connects is refused for now (HTTP 503, code at_capacity) and
	// retries with its backoff, and System.RunnerAdmission counts it.
	// Default 0: 10,000; negative: no ceiling.
	RunnerMaxSessions int
	// RunnerMaxInflightBytes is the ceiling on the runners' output this
	// process holds read and not yet stored and acknowledged, over all
	// its runners: while it is reached, new runners are refused as past
	// RunnerMaxSessions; each connected runner is held back by its own
	// window of unacknowledged output. Default 0: 1 GiB; negative: no
	// ceiling.
	RunnerMaxInflightBytes int64
	// runnerPoll is how often the controller's waiters re-read the store
	// (tests shorten it, export_test.go). Default 500 ms.
	runnerPoll time.Duration
	// RunnerBinary is the path, on this host, of berth's runner binary (a
	// static Linux build of cmd/berth-runner) that leases host for
	// runner-based runs and probes (System.RunnerSet). Default "": the
	// runner is built from berth's source with the go command when a lease
	// first needs it (package runnerbin), and without a go command or the
	// source such a lease is refused, naming this field. The library reads
	// no environment variable for it (examples/envctl reads
	// BERTH_RUNNER_BINARY).
	RunnerBinary string
	// RunnerSet, when not nil, is the runner binaries of System.RunnerSet
	// instead of RunnerBinary's one: one per architecture, and a Build
	// for an architecture it lacks (examples/envctl builds the runner from
	// the module's source there), so one System serves amd64 and arm64
	// targets.
	RunnerSet *drivers.RunnerSet
	// ProjectAuthChecker is the host's project auth check of managed
	// accounts (AUTH-2), run by System.Handover.PrepareManagedAccount.
	// Default: none; preparations stay pending until the host records
	// the answer (Handover.RecordResult).
	ProjectAuthChecker handover.Checker
}

// System is a composed berth: drivers, a catalog, assignments, a lease
// manager, a prober, the runner controller, the
// secret hand-over and the instance settings wired together over the host's stores; every service of
// the library is reachable from its accessors, which return the same
// values for the System's life. Close stops the lease manager's heartbeats
// and the controller and releases the drivers; the stores stay the host's.
type System struct {
	drivers     *drivers.Registry
	secrets     environment.SecretStore
	catalog     *environment.Catalog
	assignments *environment.Assignments
	leases      *lease.Manager
	templates   *templates.Service
	prober      *probe.Prober
	runners     *controller.Controller
	handover    *handover.Service
	settings    *instance.Service
	workspaces  *workspace.Manager

	log     *slog.Logger
	tempDir string // the runners' output directory New made, removed by Close

	taskSecrets *taskSecrets // the controller's SecretResolver (hooks.go)

	runnerBinary string
	runnerSet    *drivers.RunnerSet
	specOnce     sync.Once
	spec         *drivers.RunnerSet
	specErr      error
}

// Drivers returns the registry of the drivers the System was composed
// with.
func (s *System) Drivers() *drivers.Registry { return s.drivers }

// Secrets returns the secret store (Options.Secrets or the in-memory
// default) that holds the secrets pasted into configs.
func (s *System) Secrets() environment.SecretStore { return s.secrets }

// Catalog returns the catalog of saved environments (CFG-1..8).
func (s *System) Catalog() *environment.Catalog { return s.catalog }

// Assignments returns the assignments, which bind agents, projects,
// workspaces and the instance default to environments and resolve
// execution targets (ASG-1..5).
func (s *System) Assignments() *environment.Assignments { return s.assignments }

// Leases returns the lease manager (LEASE-1..10).
func (s *System) Leases() *lease.Manager { return s.leases }

// Workspaces returns the workspace manager: it prepares an agent's
// project in a lease's sandbox under a write-ahead record with its owner
// and checkpoint, and collects what the agent changed (package
// workspace). A lease's release ends its workspace records with a
// receipt; Sweep ends those whose lease ended otherwise.
func (s *System) Workspaces() *workspace.Manager { return s.workspaces }

// Templates returns the custom images service: capture a live lease into
// a template, promote, roll back, revoke and delete it (IMG-4..8). Leases
// of an environment start from its active template while it applies.
func (s *System) Templates() *templates.Service { return s.templates }

// SweepReport is what System.Sweep did.
type SweepReport struct {
	// Leases is the lease manager's sweep.
	Leases lease.SweepReport `json:"leases"`
	// TemplatesDeleted counts templates whose wanted deletion the sweep
	// confirmed at the provider (templates.Service.Sweep).
	TemplatesDeleted int `json:"templatesDeleted"`
	// Sessions is the setup sessions' sweep: sessions past their TTL
	// ended, their sandboxes destroyed.
	Sessions templates.SessionSweepReport `json:"sessions"`
	// WorkspacesEnded counts workspace records the sweep ended because
	// their lease no longer lives (receipt reason swept for one left
	// preparing by a crash).
	WorkspacesEnded int `json:"workspacesEnded"`
}

// Sweep ends the setup sessions past their TTL and destroys the sandboxes
// of ended ones, sweeps the lease store
// (lease.Manager.Sweep), retries the
// wanted template deletions (templates.Service.Sweep: a template is deleted
// at the provider only once no live lease uses it), and then ends the
// workspace records whose lease no longer lives. p must be allowed
// authz.ActionSweep. The first error is returned with what was done.
func (s *System) Sweep(ctx context.Context, p authz.Principal) (SweepReport, error) {
	var r SweepReport
	// Setup sessions first: the leases of the sessions it ends are
	// released there, and a cleanup left pending is retried by the lease
	// sweep right after.
	rep, err := templatehook.SweepSessions(s.templates, ctx, p)
	r.Sessions, _ = rep.(templates.SessionSweepReport)
	if err != nil {
		return r, err
	}
	if r.Leases, err = s.leases.Sweep(ctx, p); err != nil {
		return r, err
	}
	if r.TemplatesDeleted, err = s.templates.Sweep(ctx, p); err != nil {
		return r, err
	}
	// After the leases' sweep, which ends expired leases: their
	// workspaces end with them.
	r.WorkspacesEnded, err = workspacehook.Sweep(s.workspaces, ctx, p)
	return r, err
}

// Prober returns the prober, which probes saved environments and drafts
// and records qualifications (PRB-1..8, QUAL-1..7).
func (s *System) Prober() *probe.Prober { return s.prober }

// Handover returns the hand-over service, which prepares managed accounts
// (project auth checks, AUTH-2) and checks the secrets of runner tasks
// (lease.Command.Secrets); the resolver berth.New builds with it
// (internal/handoverhook), which New gives the runner controller, resolves
// them at delivery: a task's secret env keys from its lease's config, and
// managed accounts only while their project auth check matches exactly.
func (s *System) Handover() *handover.Service { return s.handover }

// Settings returns the instance settings service (CFG-9): Get for any
// known principal, Update for instance admins (with the revision read).
// The gate that resolution, probes and lease acquisition pass reads the
// settings through the service's cache: an update through this System is
// seen at once, another replica's within the instance settings' one-second staleness bound.
// With environments disabled they refuse (instance.ErrEnvironmentsDisabled)
// while releases, sweeps and catalog reads and edits go on; with
// managed-sandbox-only on, host drivers (local, ssh) are unavailable with
// the reason managed_sandbox_only. Never written, the settings are
// instance.Defaults (environments enabled).
func (s *System) Settings() *instance.Service { return s.settings }

// RunnerSet returns Options.RunnerSet, or else the drivers.RunnerSet of
// Options.RunnerBinary (its architecture and SHA-256, read once on the
// first call and kept), or else, when neither names a binary, a set that
// builds the runner from berth's source for the architecture a target
// reports (package runnerbin: once per source and go version, into the
// user's cache; the build runs before anything is allocated, and without
// a go command or berth's source the acquisition fails with an error
// wrapping runnerbin.ErrNoGo or ErrNoSource that says how to name a
// binary). It is what lease.AcquireRequest.WithRunner, runner pools and
// the runner-based probe use.
func (s *System) RunnerSet() (*drivers.RunnerSet, error) {
	if s.runnerSet != nil {
		return s.runnerSet, nil
	}
	s.specOnce.Do(func() {
		if s.runnerBinary == "" {
			s.spec = &drivers.RunnerSet{Build: func(ctx context.Context, arch string) (drivers.RunnerSpec, error) {
				bin, err := runnerbin.Binary(ctx, arch, &runnerbin.Options{Progress: func(msg string) { s.log.Info("berth: " + msg) }})
				if err != nil {
					return drivers.RunnerSpec{}, fmt.Errorf("berth: no runner binary for %s (Options.RunnerBinary): %w", arch, err)
				}
				return runnerbin.Spec(bin)
			}}
			return
		}
		s.spec, s.specErr = runnerSetOf(s.runnerBinary)
	})
	return s.spec, s.specErr
}

// runnerSetOf returns the set of the one runner binary at path, keyed by
// the architecture its ELF header names.
func runnerSetOf(path string) (*drivers.RunnerSet, error) {
	spec, err := runnerbin.Spec(path)
	if err != nil {
		return nil, err
	}
	if spec.Arch == "" {
		return nil, fmt.Errorf("berth: runner binary %q: not a Linux executable of a known architecture", spec.Binary)
	}
	return drivers.RunnerSetOf(spec), nil
}

// New composes a System over opts.Stores (memory stores when empty). It
// opens no database: the host opens one with store/sqlite or
// store/postgres and passes its Stores. Unless Options.RunnerDir names
// one, New makes the runners' output directory under os.TempDir;
// everything else is wiring and does no I/O.
func New(ctx context.Context, opts *Options) (*System, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	st := o.Stores
	if missing := st.Missing(); len(missing) == len(store.Stores{}.Missing()) {
		st = store.Memory()
	} else if len(missing) > 0 {
		return nil, fmt.Errorf("berth: Options.Stores sets some stores and leaves %s nil: set every field (store.Memory() for the ones kept in memory), or none for memory stores", strings.Join(prefixed("Stores.", missing), ", "))
	}
	ds := o.Drivers
	if ds == nil {
		ds = []drivers.Driver{local.New(nil)}
	}
	secrets := o.Secrets
	if secrets == nil {
		if st.Durable && !o.MemorySecrets {
			return nil, errors.New("berth: Options.Stores are durable and Options.Secrets is nil: the secrets of configs would be kept in memory and lost at a restart, leaving leases that need a credential unreleasable; set Options.Secrets to the host's secret store (or Options.MemorySecrets in tests)")
		}
		secrets = envhook.NewMemorySecretStore().(environment.SecretStore)
	}
	reg := drivers.NewRegistry(ds...)
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sys := &System{drivers: reg, secrets: secrets, log: logger, runnerBinary: o.RunnerBinary, runnerSet: o.RunnerSet}
	// CFG-9: one settings service; its cached Reader is what every gate
	// reads (no store round trip per acquisition while the copy is fresh).
	isvc, ireader := instancehook.New(st.Settings, instancehook.Options{Authorizer: o.Authorizer, Logger: o.Logger})
	sys.settings = isvc.(*instance.Service)
	settings := ireader.(instance.Reader)
	// The hooks one service gives another are values their constructors
	// return (hooks.go), never exported methods anyone holding a service
	// could call for no principal.
	hsvc, resolver, err := handoverhook.New(handoverhook.Sources{Checks: st.AuthChecks, Environments: st.Environments, Drivers: reg, Leases: st.Leases, Secrets: secrets,
		Authorizer: o.Authorizer, Checker: o.ProjectAuthChecker, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	sys.handover = hsvc.(*handover.Service)
	sys.taskSecrets = &taskSecrets{SecretResolver: resolver}
	// The runner controller (its secrets through the Handover) before the
	// lease manager: the manager stops and verifies the runners' tasks
	// through it before any sandbox is released (PRP-6).
	tasks, err := sys.composeRunners(st, o, settings)
	if err != nil {
		return nil, err
	}
	// One health store for the gates of the assignments, the catalog and
	// the prober: the gate reads an environment's provider health on every
	// lease, so reads are cached for up to one second (this System's own
	// measurements replace the cached record at once; another replica's
	// are seen within that age).
	health := envhook.CachedHealth(st.Health, 0).(environment.HealthStore)
	// One keeper: the catalog retires secrets, the lease manager keeps them
	// while a lease that is not proven clean uses them (CFG-7, LEASE-9).
	keeper := envhook.NewSecretKeeper(st.SecretUses, secrets, logger)
	// One Authorizer decides for the catalog, the assignments and the lease
	// manager (which asks the assignments' Authorizer).
	sys.assignments = envhook.NewAssignments(st.Bindings, st.Environments, reg, &envhook.Options{
		TestMode:   o.TestMode,
		Authorizer: o.Authorizer,
		Logger:     o.Logger,
		Health:     health,
		Settings:   settings,
	}).(*environment.Assignments)
	envs := st.Environments
	// Members of runner pools are prepared for the System's runner; the
	// orphan search and the pools cover every saved environment.
	mgr, leaseUsage := leasehook.New(leasehook.Sources{
		Store: st.Leases, Drivers: reg, Assignments: sys.assignments, Options: o.Leases, Tasks: tasks,
		Logger: o.Logger, Secrets: secrets.Get, SecretKeeper: keeper, Settings: settings,
		PoolRunners: func() (*drivers.RunnerSet, error) { return sys.RunnerSet() },
		SweepEnvironments: func(ctx context.Context) ([]*environment.Environment, error) {
			return envs.ListEnvironments(ctx, environment.ListFilter{})
		},
		// A lease's release ends its workspace records (sys.workspaces is
		// set below, before New returns and anything is released).
		Ended: func(ctx context.Context, l any) { workspacehook.LeaseEnded(sys.workspaces, ctx, l) },
	})
	sys.leases = mgr.(*lease.Manager)
	sys.workspaces = workspacehook.New(workspacehook.Sources{Store: st.Workspaces, Leases: st.Leases, LeaseManager: sys.leases, Drivers: reg,
		Authorizer: o.Authorizer, Logger: o.Logger}).(*workspace.Manager)
	tsvc, setupUsage := templatehook.New(templatehook.Sources{
		Templates: st.Templates, Environments: st.Environments, Drivers: reg, Leases: sys.leases, LeaseRecords: st.Leases,
		Secrets: secrets.Get, Authorizer: o.Authorizer, Logger: o.Logger,
	}, o.Templates)
	sys.templates = tsvc.(*templates.Service)
	// The catalog shows, clears and protects the Assignments' bindings
	// itself, and counts leases through the manager's hook.
	sys.catalog = envhook.NewCatalog(st.Environments, reg, secrets, sys.assignments, &envhook.Options{
		TestMode:   o.TestMode,
		Authorizer: o.Authorizer,
		Logger:     o.Logger,
		Health:     health,
		Settings:   settings,
		Keeper:     keeper,
		Reporters:  []any{leaseUsage, setupUsage},
		Protected:  o.Protected,
	}).(*environment.Catalog)
	sys.prober = probehook.New(probehook.Sources{
		Catalog: sys.catalog, Environments: st.Environments, Drivers: reg, Leases: sys.leases, Qualifications: st.Qualifications,
		// The gate the catalog and the assignments pass: one test mode,
		// one health store, one settings Reader.
		Gate:   envhook.NewGate(reg, &envhook.Options{TestMode: o.TestMode, Health: health, Settings: settings}),
		Logger: o.Logger, Controller: sys.runners, Runners: sys.RunnerSet,
	}).(*probe.Prober)
	return sys, nil
}

// prefixed returns each of names with prefix before it.
func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

// composeRunners builds the runner controller over st.Runners from o's
// Runner fields with the defaults they document (and the instance
// settings Reader), and returns its hook for the lease manager.
func (s *System) composeRunners(st store.Stores, o Options, settings instance.Reader) (leasehook.TaskStopper, error) {
	rs, ok := st.Runners.(controller.RunnerStore)
	if !ok {
		return nil, fmt.Errorf("berth: Options.Stores.Runners is %T, not a runner store berth made: set it from store.Memory(), store/sqlite or store/postgres", st.Runners)
	}
	co := controller.Options{Tickets: rs, Store: rs, Authorizer: o.Authorizer, Logger: o.Logger, Settings: settings,
		DataDir: o.RunnerDir, Heartbeat: o.RunnerHeartbeat, MaxSessionOutput: o.RunnerMaxOutput, Poll: o.runnerPoll,
		MaxSessions: o.RunnerMaxSessions, MaxInflightBytes: o.RunnerMaxInflightBytes}
	keys := o.RunnerKeys
	if len(keys) == 0 {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("berth: runner signing key: %w", err)
		}
		keys = [][]byte{key}
	}
	byID := make(map[string][]byte, len(keys))
	for _, k := range keys {
		byID[keyID(k)] = k
	}
	signer, err := prp.NewSigner(keyID(keys[0]), byID)
	if err != nil {
		return nil, fmt.Errorf("berth: Options.RunnerKeys: %w", err)
	}
	if co.DataDir == "" {
		dir, err := os.MkdirTemp("", "berth-prp-")
		if err != nil {
			return nil, fmt.Errorf("berth: runner output directory: %w", err)
		}
		co.DataDir, s.tempDir = dir, dir
	}
	c, tasks, err := controller.New(signer, leaseRecords{st.Leases}, s.taskSecrets, &co)
	if err != nil {
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
		return nil, err
	}
	s.runners = c
	return tasks, nil
}

// RunnerAdmission is what the admission control of this process's runner
// controller counts (Options.RunnerMaxSessions and
// RunnerMaxInflightBytes).
type RunnerAdmission struct {
	// Sessions is the runners connected (admitted and not yet gone);
	// MaxSessions the ceiling (negative: none).
	Sessions, MaxSessions int64
	// InflightBytes is the runners' output read and not yet acknowledged;
	// MaxInflightBytes the ceiling (negative: none).
	InflightBytes, MaxInflightBytes int64
	// RefusedSessions and RefusedBytes count the runner connections
	// refused since New past each ceiling (each retried on its own).
	RefusedSessions, RefusedBytes int64
}

// RunnerAdmission returns the counts of the runner controller's admission
// control in this process (a read of its counters; nothing is
// authorized).
func (s *System) RunnerAdmission() RunnerAdmission {
	a := s.runners.Admission()
	return RunnerAdmission{Sessions: a.Sessions, MaxSessions: a.MaxSessions, InflightBytes: a.InflightBytes, MaxInflightBytes: a.MaxInflightBytes,
		RefusedSessions: a.RefusedSessions, RefusedBytes: a.RefusedBytes}
}

// keyID names a runner key in the tokens it signs: the start of its
// SHA-256, the same on every replica that has the key.
func keyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// leaseRecords is the runner controller's view of the lease store
// (controller.LeaseReader): it reads one lease and hands out nothing that
// writes.
type leaseRecords struct{ st lease.Store }

func (r leaseRecords) GetLease(ctx context.Context, id string) (*lease.Lease, error) {
	return r.st.GetLease(ctx, id)
}

// RunHealthChecks measures the health of every provider endpoint that an
// active saved environment uses (CAP-3), now and then every interval, until
// ctx ends; it returns ctx's error. Results go to the store, where listings,
// resolution, probes and lease acquisition of every process read them. A
// host runs it in a goroutine; without it, providers are measured only by
// probes and explicit refreshes (environment.Catalog.RefreshHealth). A
// round's errors (a config that cannot be resolved, a store failure) are
// logged and the next round runs. interval <= 0 means a minute. The rounds
// run for p (environment.Catalog.RefreshAllHealth: ActionProbe, an
// instance admin or local operator under authz.DefaultPolicy, typically
// the host's own service principal); a p who may not is refused at once
// with an error wrapping errcode.ErrDenied.
func (s *System) RunHealthChecks(ctx context.Context, p authz.Principal, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := s.catalog.RefreshAllHealth(ctx, p)
		if errors.Is(err, errcode.ErrDenied) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "provider health round failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close stops the lease manager's host lease heartbeats (it releases
// nothing: their claims expire and other replicas end them by a check),
// closes the runner controller and the
// registered drivers that implement io.Closer (see drivers.Registry.Close),
// and returns their joined errors. It closes no store: the host closes the
// database it opened, after the System.
func (s *System) Close() error {
	if s == nil {
		return nil
	}
	if s.leases != nil {
		_ = leasehook.Close(s.leases)
	}
	var errs []error
	if s.runners != nil {
		errs = append(errs, s.runners.Close())
	}
	if s.tempDir != "" {
		errs = append(errs, os.RemoveAll(s.tempDir))
	}
	if s.drivers != nil {
		errs = append(errs, s.drivers.Close())
	}
	return errors.Join(errs...)
}
