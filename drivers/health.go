package drivers

import (
	"context"

	"github.com/berthdev/berth/drivers/config"
)

// HealthChecker is an optional interface that may be implemented by a
// Driver whose targets sit behind a provider control plane (a container
// engine, a sandbox API). It measures the provider's live health (CAP-3)
// with a bounded ping that allocates nothing. If a Driver does not
// implement HealthChecker, its provider has no health of its own (host
// targets: whether the host answers is the probe's business) and it counts
// as available whenever Available says so.
//
// Health is kept per provider endpoint: configs that name the same
// endpoint share one measurement.
type HealthChecker interface {
	// Endpoint returns the identity of the provider endpoint that cfg
	// addresses, such as the Docker engine host, or the API URL and the
	// account's secret reference. cfg may hold secret references; the
	// result holds no secret value. It does no I/O; it returns "" when cfg
	// names no endpoint (a config that does not validate).
	Endpoint(cfg config.Config) string
	// CheckHealth pings the provider endpoint of cfg (secrets resolved),
	// bounded by ctx, without allocating anything. It returns nil when the
	// provider serves requests, else an error wrapping ErrUnavailable (the
	// control plane cannot be reached or refuses service), ErrAuth or
	// ErrTLSUnverified, naming the endpoint and never a secret.
	CheckHealth(ctx context.Context, cfg config.Config) error
}
