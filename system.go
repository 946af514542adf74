package berth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/images/resolve"
	"github.com/berthdev/berth/internal/sqlstore"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/prp"
	"github.com/berthdev/berth/prp/controller"
)

// Options configures New. The zero value (or nil) composes the embedded
// default: an in-memory store, an in-memory secret store, the local and fake
// drivers, and the default authorization policy.
type Options struct {
	// StoreURL selects the store: "" for the in-memory store,
	// "sqlite:///path/to/file.db" or "postgres://..." (see OpenStore).
	StoreURL string
	// Drivers are the drivers to register. Default: local.New(nil) and
	// fake.New(nil).
	Drivers []drivers.Driver
	// Secrets is the host's secret store. Default: an in-memory one, whose
	// secrets are lost when the process ends.
	Secrets environment.SecretStore
	// TestMode lets test-only drivers (fake) be saved as working targets
	// (CFG-4). Default false.
	TestMode bool
	// InstanceID names this installation; it labels every sandbox so that
	// sweeps find this instance's orphans. Default lease.DefaultInstanceID.
	InstanceID string
	// Authorizer decides every catalog, assignment and lease action
	// (AUTH-1). Default authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Logger receives library logs; never a secret. Default: discard.
	Logger *slog.Logger
	// ClaimGrace is added to a startup budget to form the claim of an
	// acquisition in progress; a claim older than that is taken for a
	// crashed acquisition and swept (LEASE-9). Default
	// lease.DefaultClaimGrace.
	ClaimGrace time.Duration
	// LeasePruneAfter is how long the record of an ended lease (with its
	// cleanup receipt) is kept before a sweep prunes it. Default
	// lease.DefaultPruneAfter; negative keeps records forever.
	LeasePruneAfter time.Duration
	// Probe configures the Prober (stage deadlines, progress). Default:
	// probe's defaults.
	Probe *probe.Options
	// Images configures the image Resolver that pins tags to digests
	// (IMG-2): the host's registry keychain, insecure registries. Default:
	// anonymous access, loopback registries only over plain HTTP.
	Images *resolve.Options
	// Runners configures the runner protocol's controller (System.Runners).
	// Fields left zero are filled: Tickets and Store with the System's store
	// (SQLite and PostgreSQL share them across replicas; the memory store
	// keeps them in this process) and Authorizer with Options.Authorizer.
	// With neither Sink nor DataDir, output chunk files go to a directory
	// New makes under os.TempDir and Close removes. The controller's
	// collaborators are New's to wire: a read-only view of the System's
	// lease records (tickets are bound to the lease's company; sessions
	// end with their lease) and System.Handover's secret resolver.
	Runners *controller.Options
	// RunnerSigner mints and verifies the runners' connection tokens.
	// Default: a random key of this process; replicas must pass one Signer
	// with shared keys.
	RunnerSigner *prp.Signer
	// RunnerBinary is the path, on this host, of berth's runner binary (a
	// static Linux build of examples/runner) that leases host for
	// runner-based runs and probes (System.RunnerSet). Default "": none;
	// runner-based probes then fail as unsupported. The library reads no
	// environment variable for it (examples/envctl reads
	// BERTH_RUNNER_BINARY).
	RunnerBinary string
	// ProjectAuthChecker is the host's project auth check of managed
	// accounts (AUTH-2), run by System.Handover.PrepareManagedAccount.
	// Default: none; preparations stay pending until the host records
	// the answer (Handover.RecordResult).
	ProjectAuthChecker handover.Checker
}

// System is a composed berth: a store, drivers, a catalog, assignments, a
// lease manager, a prober and an image resolver wired together; every
// service of the library is reachable from it with defaults. Its fields are
// ready to use; Close stops the lease manager's heartbeats and releases the
// drivers and the store.
type System struct {
	Store   Store
	Drivers *drivers.Registry
	Secrets environment.SecretStore
	Catalog *environment.Catalog
	// Assignments binds agents, projects, workspaces and the instance
	// default to environments and resolves execution targets (ASG-1..5).
	Assignments *environment.Assignments
	Leases      *lease.Manager
	// Prober probes saved environments and drafts and records
	// qualifications (PRB-1..8, QUAL-1..7).
	Prober *probe.Prober
	// Images pins image tags to digests (IMG-2).
	Images *resolve.Resolver
	// Runners is the runner protocol's controller (PRP): Attach connects a
	// leased sandbox's runner (serving the controller on the sandbox's
	// ingress) and returns a handle whose Start runs tasks
	// (controller.Task: Wait, Output, Stop); it is also an http.Handler
	// for runners that dial over HTTP. New gives the lease manager the
	// controller's task hook (the lease.TaskStopper that controller.New
	// returns): releasing or sweeping a lease stops and verifies its
	// runner tasks first.
	Runners *controller.Controller
	// Handover prepares managed accounts (project auth checks, AUTH-2)
	// and checks the secrets of runner tasks for Runners; the resolver
	// handover.New returns with it, which New gives the controller,
	// resolves them at delivery: a task's secret env keys from its
	// lease's config, and managed accounts only while their project auth
	// check matches exactly.
	Handover *handover.Service

	log     *slog.Logger
	tempDir string // the runners' output directory New made, removed by Close

	secrets *taskSecrets // the controller's SecretResolver (hooks.go)

	runnerBinary string
	specOnce     sync.Once
	spec         *drivers.RunnerSet
	specErr      error
}

// RunnerSet returns the drivers.RunnerSet of Options.RunnerBinary (its
// architecture and SHA-256, read once on the first call and kept), for
// lease.AcquireRequest.Runner (controller.Attach reads the binary from the
// lease). Without a RunnerBinary it returns an error wrapping
// drivers.ErrUnsupported.
func (s *System) RunnerSet() (*drivers.RunnerSet, error) {
	if s.runnerBinary == "" {
		return nil, fmt.Errorf("berth: no runner binary configured (Options.RunnerBinary; build one with CGO_ENABLED=0 go build -o berth-runner ./examples/runner): %w", drivers.ErrUnsupported)
	}
	s.specOnce.Do(func() { s.spec, s.specErr = controller.RunnerSetFromFiles(s.runnerBinary) })
	return s.spec, s.specErr
}

// New composes a System. It opens (and migrates) the store named by
// opts.StoreURL and, unless Options.Runners names a Sink or a DataDir,
// makes the runners' output directory under os.TempDir; everything else
// is wiring and does no I/O.
func New(ctx context.Context, opts *Options) (*System, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var (
		st  Store
		err error
	)
	if o.StoreURL == "" {
		st = NewMemoryStore()
	} else if st, err = OpenStore(ctx, o.StoreURL); err != nil {
		return nil, err
	}
	ds := o.Drivers
	if ds == nil {
		ds = []drivers.Driver{local.New(nil), fake.New(nil)}
	}
	secrets := o.Secrets
	if secrets == nil {
		secrets = environment.NewMemorySecretStore()
	}
	reg := drivers.NewRegistry(ds...)
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sys := &System{Store: st, Drivers: reg, Secrets: secrets, log: logger, runnerBinary: o.RunnerBinary}
	// The hooks one service gives another are values their constructors
	// return (hooks.go), never exported methods anyone holding a service
	// could call for no principal.
	var resolver controller.SecretResolver
	sys.Handover, resolver, err = handover.New(handover.Sources{Checks: st, Environments: st, Drivers: reg, Leases: st, Secrets: secrets},
		&handover.Options{Authorizer: o.Authorizer, Checker: o.ProjectAuthChecker, Logger: o.Logger})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	sys.secrets = &taskSecrets{SecretResolver: resolver}
	// The runner controller (its secrets through the Handover) before the
	// lease manager: the manager stops and verifies the runners' tasks
	// through it before any sandbox is released (PRP-6).
	tasks, err := sys.composeRunners(st, o)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	// One keeper: the catalog retires secrets, the lease manager keeps them
	// while a lease that is not proven clean uses them (CFG-7, LEASE-9).
	keeper := environment.NewSecretKeeper(st, secrets, logger)
	// One Authorizer decides for the catalog, the assignments and the lease
	// manager (which asks the assignments' Authorizer).
	sys.Assignments = environment.NewAssignments(st, st, reg, &environment.Options{
		TestMode:   o.TestMode,
		Authorizer: o.Authorizer,
		Logger:     o.Logger,
		Health:     st,
	})
	var leaseUsage environment.UsageReporter
	sys.Leases, leaseUsage = lease.NewManager(st, reg, sys.Assignments, tasks, &lease.Options{
		InstanceID:   o.InstanceID,
		Logger:       o.Logger,
		ClaimGrace:   o.ClaimGrace,
		PruneAfter:   o.LeasePruneAfter,
		Secrets:      secrets.Get,
		SecretKeeper: keeper,
		SweepEnvironments: func(ctx context.Context) ([]*environment.Environment, error) {
			return st.ListEnvironments(ctx, environment.ListFilter{})
		},
	})
	// The catalog shows, clears and protects the Assignments' bindings
	// itself, and counts leases through the manager's hook.
	sys.Catalog = environment.NewCatalog(st, reg, secrets, sys.Assignments, &environment.Options{
		TestMode:       o.TestMode,
		Authorizer:     o.Authorizer,
		Logger:         o.Logger,
		UsageReporters: []environment.UsageReporter{leaseUsage},
		Health:         st,
		SecretKeeper:   keeper,
	})
	var popts probe.Options
	if o.Probe != nil {
		popts = *o.Probe
	}
	if popts.Runner == nil {
		popts.Runner = &probe.RunnerProbe{Controller: sys.Runners, Runners: sys.RunnerSet}
	}
	sys.Prober = probe.New(probe.Sources{
		Catalog: sys.Catalog, Environments: st, Drivers: reg, Leases: sys.Leases, Qualifications: st,
		// The gate the catalog and the assignments pass: one test mode,
		// one health store.
		Gate: environment.NewGate(reg, &environment.GateOptions{TestMode: o.TestMode, Health: st}),
	}, &popts)
	ropts := resolve.Options{Logger: o.Logger}
	if o.Images != nil {
		ropts = *o.Images
		if ropts.Logger == nil {
			ropts.Logger = o.Logger
		}
	}
	sys.Images = resolve.New(&ropts)
	return sys, nil
}

// composeRunners builds System.Runners from o.Runners with the defaults
// Options.Runners documents, and returns the controller's hook for the
// lease manager.
func (s *System) composeRunners(st Store, o Options) (lease.TaskStopper, error) {
	var co controller.Options
	if o.Runners != nil {
		co = *o.Runners
	}
	if co.Tickets == nil || co.Store == nil {
		var tickets prp.TicketStore = &prp.MemoryTicketStore{}
		var cs controller.Store = &controller.MemoryStore{}
		if db, ok := st.(interface{ PRP() *sqlstore.PRPStore }); ok {
			ps := db.PRP()
			tickets, cs = ps, ps
		}
		if co.Tickets == nil {
			co.Tickets = tickets
		}
		if co.Store == nil {
			co.Store = cs
		}
	}
	if co.Authorizer == nil {
		co.Authorizer = o.Authorizer
	}
	if co.Logger == nil {
		co.Logger = o.Logger
	}
	signer := o.RunnerSigner
	if signer == nil {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("berth: runner signing key: %w", err)
		}
		var err error
		if signer, err = prp.NewSigner("process", map[string][]byte{"process": key}); err != nil {
			return nil, err
		}
	}
	if co.Sink == nil && co.DataDir == "" {
		dir, err := os.MkdirTemp("", "berth-prp-")
		if err != nil {
			return nil, fmt.Errorf("berth: runner output directory: %w", err)
		}
		co.DataDir, s.tempDir = dir, dir
	}
	c, tasks, err := controller.New(signer, leaseRecords{st}, s.secrets, &co)
	if err != nil {
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
		return nil, err
	}
	s.Runners = c
	return tasks, nil
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
// with an error wrapping authz.ErrDenied.
func (s *System) RunHealthChecks(ctx context.Context, p authz.Principal, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := s.Catalog.RefreshAllHealth(ctx, p)
		if errors.Is(err, authz.ErrDenied) {
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
// nothing; see lease.Manager.Close), closes the registered drivers that
// implement io.Closer (see drivers.Registry.Close), then the store, and
// returns their joined errors.
func (s *System) Close() error {
	if s == nil {
		return nil
	}
	if s.Leases != nil {
		_ = s.Leases.Close()
	}
	var errs []error
	if s.Runners != nil {
		errs = append(errs, s.Runners.Close())
	}
	if s.tempDir != "" {
		errs = append(errs, os.RemoveAll(s.tempDir))
	}
	if s.Drivers != nil {
		errs = append(errs, s.Drivers.Close())
	}
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
	}
	return errors.Join(errs...)
}
