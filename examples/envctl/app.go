package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/sqlite"
)

// registeredDrivers are the drivers envctl offers: the local host, SSH
// hosts, Docker engines, Daytona, and the fake (saved only in --test-mode).
// Constructing them does no I/O: the Docker driver contacts its engine at
// acquire (an unreachable engine fails the acquisition or probe with
// drivers.ErrUnavailable), Daytona its API, SSH its server.
func registeredDrivers() []drivers.Driver {
	return []drivers.Driver{local.New(nil), ssh.New(nil), docker.New(nil), daytona.New(nil), fake.New(nil)}
}

// driverList returns g.drivers, or registeredDrivers() when unset.
func (g *globals) driverList() []drivers.Driver {
	if g.drivers != nil {
		return g.drivers
	}
	return registeredDrivers()
}

// system is a berth.System over the --db file's stores; Close closes the
// System, then the database.
type system struct {
	*berth.System
	stores store.Stores
	db     *sqlite.DB
}

// settings returns a Reader of the stores' instance settings, as the
// System's availability gate reads them: the stored settings, or the
// defaults while none were written.
func (s *system) settings() instance.Reader { return settingsReader{s.stores.Settings} }

// settingsReader is an instance.Reader over the settings store.
type settingsReader struct{ st instance.Store }

func (r settingsReader) Current(ctx context.Context) (instance.Settings, error) {
	s, err := r.st.GetSettings(ctx)
	if errors.Is(err, errcode.ErrNotFound) {
		return instance.Defaults(), nil
	}
	return s, err
}

// Close closes the System and then its database.
func (s *system) Close() error {
	return errors.Join(s.System.Close(), s.db.Close())
}

// openSystem opens the catalog in the --db file.
func openSystem(ctx context.Context, g *globals) (*system, error) {
	path, err := filepath.Abs(g.db)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("envctl: database directory: %w", err)
	}
	secrets, err := secretfile.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	sys, err := berth.New(ctx, &berth.Options{
		Stores:   db.Stores(),
		Drivers:  g.driverList(),
		Secrets:  secrets,
		TestMode: g.testMode,
		// envctl exits after one command: it starts no background pool
		// refill (one would be cut off at exit); a running host's next
		// sweep or pool maintenance fills the pools.
		Leases:       &lease.Options{ClaimGrace: g.claimGrace, PruneAfter: g.leaseRetention, ManualPoolRefill: true},
		RunnerBinary: g.runnerBinary,
		RunnerSet:    g.runnerSet,
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &system{System: sys, stores: db.Stores(), db: db}, nil
}

// runDrivers lists drivers, whether each can be used (test mode
// included), their capabilities and the provider health last measured. It
// reads the store and calls no provider.
func runDrivers(ctx context.Context, g *globals, args []string) error {
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	health, err := sys.stores.Health.ListProviderHealth(ctx)
	if err != nil {
		return err
	}
	rows, err := driverRows(ctx, sys.Catalog(), g.as, sys.settings(), health)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, rows)
	}
	return printDrivers(g.stdout, rows)
}
