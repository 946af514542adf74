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

// Protected exposes the catalog's protection hook of a (instance default)
// to this package's external tests.
func Protected(a *Assignments, ctx context.Context, env *Environment) string {
	return a.protected(ctx, env)
}
