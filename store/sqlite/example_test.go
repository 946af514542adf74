package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/store/sqlite"
)

// A host opens its SQLite file (Open migrates it), hands its Stores to
// berth.New, and closes the database after the System. What one System
// saved, the next one on the same file reads.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "berth-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "berth.db")
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

	// run opens the database, runs a System over it, and closes both.
	run := func(f func(sys *berth.System) error) error {
		db, err := sqlite.Open(ctx, path)
		if err != nil {
			return err
		}
		defer db.Close() // after the System
		sys, err := berth.New(ctx, &berth.Options{
			Stores:   db.Stores(),
			Drivers:  []drivers.Driver{fake.New(nil)},
			TestMode: true, // the fake driver is for tests only
			// A host passes its secret manager as Secrets; this example's
			// configs hold no secret, so it asks for memory secrets by name.
			MemorySecrets: true,
		})
		if err != nil {
			return err
		}
		defer sys.Close()
		return f(sys)
	}

	err = run(func(sys *berth.System) error {
		_, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "sandboxes", Driver: "fake"})
		return err
	})
	fmt.Println("saved:", err)
	err = run(func(sys *berth.System) error {
		views, err := sys.Catalog().List(ctx, operator, environment.ListFilter{})
		for _, v := range views {
			fmt.Println(v.Name, v.Driver)
		}
		return err
	})
	fmt.Println("read:", err)
	// Output:
	// saved: <nil>
	// sandboxes fake
	// read: <nil>
}
