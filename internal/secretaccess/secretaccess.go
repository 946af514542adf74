// Package secretaccess lets berth's own packages reach the one catalog
// function that returns secret values (the resolved config of a saved
// environment) without exporting it: package environment registers it at
// init, and only packages of this module can import an internal package.
// Hosts never get resolved secret values from berth's API; the lease
// manager resolves them itself (lease.Options.Secrets) on its acquire and
// cleanup paths, and the prober reads them only to scrub its output.
package secretaccess

import (
	"context"

	"github.com/berthdev/berth/drivers"
)

var resolvedConfig any

// SetResolvedConfig registers f; package environment calls it at init.
func SetResolvedConfig[C, E any](f func(c C, ctx context.Context, id string) (E, drivers.Config, error)) {
	resolvedConfig = f
}

// ResolvedConfig calls the registered function: the stored record of
// environment id (secret references only) and its config with secret
// values resolved. The config must never be logged, stored or shown.
func ResolvedConfig[C, E any](c C, ctx context.Context, id string) (E, drivers.Config, error) {
	return resolvedConfig.(func(C, context.Context, string) (E, drivers.Config, error))(c, ctx, id)
}
