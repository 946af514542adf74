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
		StoreURL: "sqlite://" + path,
		Drivers:  g.driverList(),
		Secrets:  secrets,
		TestMode: g.testMode,
	})
}

// runDrivers lists drivers and capabilities; it opens no store.
func runDrivers(_ context.Context, g *globals, args []string) error {
	reg := drivers.NewRegistry(g.driverList()...)
	if g.json {
		return writeJSON(g.stdout, reg.List())
	}
	return printDrivers(g.stdout, reg)
}
