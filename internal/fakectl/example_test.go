package fakectl_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/fakectl"
)

// Faults are deterministic: the second create fails, a refused stop leaves
// the sandbox running, and a faked stop is no proof.
func Example() {
	ctx := context.Background()
	d := fake.New(nil)
	fakectl.Of(d).FailNth("create", 2, drivers.ErrTransient)

	a, _ := d.Acquire(ctx, config.Config{}, drivers.AcquireRequest{})
	_, err := d.Acquire(ctx, config.Config{}, drivers.AcquireRequest{})
	fmt.Println("second create transient:", errors.Is(err, drivers.ErrTransient))

	fakectl.Of(d).RefuseStop(a.ID(), drivers.ErrUnreachable)
	_, err = a.Release(ctx, drivers.Stop)
	st, _ := fakectl.Of(d).State(a.ID())
	fmt.Println("refused:", errors.Is(err, drivers.ErrUnreachable), st)

	fakectl.Of(d).ClearFaults()
	fakectl.Of(d).FakeStop(a.ID(), "unconfirmed")
	r, _ := a.Release(ctx, drivers.Stop)
	st, _ = fakectl.Of(d).State(a.ID())
	fmt.Println("faked:", r.Proves(a.ID(), drivers.Stop), st)
	fmt.Println("creates:", fakectl.Of(d).Calls("create"), "stops:", fakectl.Of(d).Calls("stop"), "of", fakectl.Of(d).TotalCalls())
	// Output:
	// second create transient: true
	// refused: true running
	// faked: false running
	// creates: 2 stops: 2 of 5
}
