package drivers_test

import (
	"context"
	"fmt"
	"os"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
)

// A host composes its drivers in a Registry, normalizes a config with the
// driver's schema, acquires a sandbox, streams a command through the
// capability it resolves on the live sandbox, and classifies failures by
// their stable code.
func Example() {
	ctx := context.Background()
	reg := drivers.NewRegistry(fake.New(nil))
	d, err := reg.Lookup("fake")
	if err != nil {
		panic(err)
	}

	// A bad value is refused by the schema, naming the field.
	_, err = d.Schema().Normalize(map[string]any{"image": fake.DefaultImage, "cpus": 0})
	fmt.Println(errcode.ReasonOf(err), "-", err)

	cfg, err := d.Schema().Normalize(map[string]any{"image": fake.DefaultImage})
	if err != nil {
		panic(err)
	}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "example"})
	if err != nil {
		panic(err)
	}
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, 0)
	if err != nil {
		panic(err)
	}
	p, err := se.Start(ctx, drivers.Command{Argv: []string{"echo", "streamed"}}, os.Stdout, nil)
	if err != nil {
		panic(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("exit", res.ExitCode)
	r, err := sb.Release(ctx, drivers.Destroy)
	fmt.Println(r.State, r.Proves(sb.ID(), drivers.Destroy), err)

	// A missing image is ErrImageNotFound, code image_not_found.
	cfg["image"] = "registry.example/none:1"
	_, err = d.Acquire(ctx, cfg, drivers.AcquireRequest{})
	fmt.Println(errcode.ReasonOf(err))
	// Output:
	// invalid_config - fake config: field "cpus": must be between 1 and 64
	// streamed
	// exit 0
	// destroyed true <nil>
	// image_not_found
}
