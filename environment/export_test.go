package environment

import (
	"context"

	"github.com/berthdev/berth/drivers/config"
)

// ResolvedConfigForTest exposes the unexported resolved config to this
// package's external tests (the export_test.go pattern); it is compiled
// only into tests.
func ResolvedConfigForTest(c *Catalog, ctx context.Context, id string) (*Environment, config.Config, error) {
	return c.resolvedConfig(ctx, id)
}

// Protected exposes the catalog's protection hook of a (instance default)
// to this package's external tests.
func Protected(a *Assignments, ctx context.Context, env *Environment) string {
	return a.protected(ctx, env)
}

// The CFG-5 and secret-name rules, for this package's external tests.
var (
	IsReservedMetadataKey = isReservedMetadataKey
	LooksLikeSecretName   = looksLikeSecretName
	ReservedFields        = reservedFieldsCopy
)
