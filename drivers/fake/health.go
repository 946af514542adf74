package fake

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

var _ drivers.HealthChecker = (*Driver)(nil)

// Endpoint implements drivers.HealthChecker: "fake region R" for the
// config's region (the default region when absent). No I/O.
func (d *Driver) Endpoint(cfg config.Config) string {
	region := cfg.String(FieldRegion)
	if region == "" {
		region = DefaultRegion
	}
	return d.name + " region " + region
}

// CheckHealth implements drivers.HealthChecker. It is counted as OpHealth,
// so a fault injected for OpHealth makes the provider unhealthy (the error
// wraps drivers.ErrUnavailable and the fault's error); it allocates nothing
// and honours ctx.
func (d *Driver) CheckHealth(ctx context.Context, cfg config.Config) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	err := d.callLocked(OpHealth, "")
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("fake %s: %w: %w", d.Endpoint(cfg), drivers.ErrUnavailable, err)
	}
	return d.checkKey(cfg)
}
