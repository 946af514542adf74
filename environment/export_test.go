package environment

import (
	"context"

	"github.com/berthdev/berth/drivers"
)

// ResolvedConfigForTest exposes the unexported resolved config to this
// package's external tests (the export_test.go pattern); it is compiled
// only into tests.
func ResolvedConfigForTest(c *Catalog, ctx context.Context, id string) (*Environment, drivers.Config, error) {
	return c.resolvedConfig(ctx, id)
}
