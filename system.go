package berth

import (
	"context"
	"log/slog"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
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
	// (AUTH-1). Default environment.DefaultPolicy.
	Authorizer environment.Authorizer
	// Logger receives library logs; never a secret. Default: discard.
	Logger *slog.Logger
}

// System is a composed berth: a store, drivers, a catalog and a lease
// manager wired together. Its fields are ready to use; Close stops the
// lease manager's heartbeats and releases the store.
type System struct {
	Store   Store
	Drivers *drivers.Registry
	Secrets environment.SecretStore
	Catalog *environment.Catalog
	// Assignments binds agents, projects, workspaces and the instance
	// default to environments and resolves execution targets (ASG-1..5).
	Assignments *environment.Assignments
	Leases      *lease.Manager
}

// New composes a System. It opens (and migrates) the store named by
// opts.StoreURL; everything else is wiring and does no I/O.
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
	sys := &System{Store: st, Drivers: reg, Secrets: secrets}
	// One Authorizer decides for the catalog, the assignments and the lease
	// manager (which asks the assignments' Authorizer).
	sys.Assignments = environment.NewAssignments(st, st, reg, &environment.AssignmentOptions{
		TestMode:   o.TestMode,
		Authorizer: o.Authorizer,
		Logger:     o.Logger,
	})
	sys.Leases = lease.NewManager(st, reg, &lease.Options{
		InstanceID:  o.InstanceID,
		Logger:      o.Logger,
		Secrets:     secrets.Get,
		Assignments: sys.Assignments,
		SweepEnvironments: func(ctx context.Context) ([]*environment.Environment, error) {
			return st.ListEnvironments(ctx, environment.ListFilter{})
		},
	})
	sys.Catalog = environment.NewCatalog(st, reg, secrets, &environment.Options{
		TestMode:       o.TestMode,
		Authorizer:     o.Authorizer,
		Logger:         o.Logger,
		UsageReporters: []environment.UsageReporter{sys.Assignments, sys.Leases},
		Protected:      sys.Assignments.Protected,
	})
	return sys, nil
}

// Close stops the lease manager's host lease heartbeats (it releases
// nothing; see lease.Manager.Close) and closes the store.
func (s *System) Close() error {
	if s == nil {
		return nil
	}
	if s.Leases != nil {
		_ = s.Leases.Close()
	}
	if s.Store == nil {
		return nil
	}
	return s.Store.Close()
}
