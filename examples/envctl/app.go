package main

import (
	"context"
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

// openSystem opens the catalog in the --db file.
func openSystem(ctx context.Context, g *globals) (*berth.System, error) {
	path, err := filepath.Abs(g.db)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("envctl: database directory: %w", err)
	}
	secrets, err := openFileSecrets(ctx, path)
	if err != nil {
		return nil, err
	}
	return berth.New(ctx, &berth.Options{
		StoreURL:        "sqlite://" + path,
		Drivers:         g.driverList(),
		Secrets:         secrets,
		TestMode:        g.testMode,
		ClaimGrace:      g.claimGrace,
		LeasePruneAfter: g.leaseRetention,
		RunnerBinary:    g.runnerBinary,
	})
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
	health, err := sys.Store.ListProviderHealth(ctx)
	if err != nil {
		return err
	}
	rows := driverRows(sys.Drivers(), sys.Catalog().Gate(), health)
	if g.json {
		return writeJSON(g.stdout, rows)
	}
	return printDrivers(g.stdout, rows)
}
