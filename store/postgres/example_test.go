package postgres_test

import (
	"context"
	"log"
	"os"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/store/postgres"
)

// A host connects to its PostgreSQL database (Open migrates it), hands its
// Stores to berth.New, and closes the database after the System. Replicas
// of the host open the same database and share every record.
//
// This example needs a PostgreSQL server, so it is compiled but not run
// (it has no Output comment); store/sqlite's ExampleOpen runs the same
// program on a SQLite file.
func ExampleOpen() {
	ctx := context.Background()
	db, err := postgres.Open(ctx, os.Getenv("BERTH_DATABASE_URL")) // "postgres://berth@db.internal/berth"
	if err != nil {
		log.Fatal(err) // the error never holds the URL's password
	}
	defer db.Close() // after the System
	sys, err := berth.New(ctx, &berth.Options{
		Stores:  db.Stores(),
		Drivers: []drivers.Driver{ssh.New(nil), docker.New(nil)},
		Secrets: hostSecrets, // required with durable stores: the host's secret manager
	})
	if err != nil {
		log.Print(err)
		return
	}
	defer sys.Close()
	// Serve sys.Catalog(), sys.Leases(), ... to operators and agents.
}

// hostSecrets stands for the host's secret manager: its
// environment.SecretStore over Vault, a cloud KMS, ... (tests pass
// berth.Options.MemorySecrets instead).
var hostSecrets environment.SecretStore
