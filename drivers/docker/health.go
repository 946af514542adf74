package docker

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

var _ drivers.HealthChecker = (*driver)(nil)

// Endpoint implements drivers.HealthChecker: the engine host the config
// addresses (its host field, else the driver's default host). It does no
// I/O.
func (d *driver) Endpoint(cfg config.Config) string {
	if h := cfg.String(fieldHost); h != "" {
		return h
	}
	if f, ok := d.schema.Field(fieldHost); ok {
		if h, _ := f.Default.(string); h != "" {
			return h
		}
	}
	return ""
}

// CheckHealth implements drivers.HealthChecker with the engine's /_ping:
// nothing is allocated. An engine that cannot be reached or does not answer
// the ping is drivers.ErrUnavailable (PRB-5: the provider's control plane);
// the error names the host.
func (d *driver) CheckHealth(ctx context.Context, cfg config.Config) error {
	host := d.Endpoint(cfg)
	cli, err := d.client(host)
	if err != nil {
		return err
	}
	if _, err := cli.Ping(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("docker %s: ping: %w: %w", host, drivers.ErrUnavailable, ctx.Err())
		}
		return engineDown(host, fmt.Errorf("docker %s: ping: %v: %w", host, err, drivers.ErrUnavailable))
	}
	return nil
}
