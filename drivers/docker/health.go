package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

var _ drivers.HealthChecker = (*driver)(nil)

// Endpoint implements drivers.HealthChecker: the engine host the config
// addresses (its host field, else the driver's default host), followed by
// " (runtime NAME)" when the config sets a runtime: the engine's runtimes
// are part of what its health says, so configs of one engine under
// different runtimes keep a measurement each. It does no I/O.
func (d *driver) Endpoint(cfg config.Config) string {
	host := d.hostOf(cfg)
	if host == "" {
		return ""
	}
	if rt := cfg.String(fieldRuntime); rt != "" {
		return host + " (runtime " + rt + ")"
	}
	return host
}

// hostOf returns the engine host cfg addresses: its host field, else the
// driver's default host.
func (d *driver) hostOf(cfg config.Config) string {
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

// CheckHealth implements drivers.HealthChecker with the engine's /_ping
// and, when the config sets a runtime, the engine's info (the runtimes it
// lists, as docker info does): nothing is allocated. An engine that cannot
// be reached or does not answer is drivers.ErrUnavailable (PRB-5: the
// provider's control plane); so is an engine that does not list the
// configured runtime, the error naming the runtimes it has. The error
// names the host.
func (d *driver) CheckHealth(ctx context.Context, cfg config.Config) error {
	host := d.hostOf(cfg)
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
	rt := cfg.String(fieldRuntime)
	if rt == "" {
		return nil
	}
	info, err := cli.Info(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("docker %s: info: %w: %w", host, drivers.ErrUnavailable, ctx.Err())
		}
		return engineDown(host, fmt.Errorf("docker %s: info: %v: %w", host, err, drivers.ErrUnavailable))
	}
	if _, ok := info.Runtimes[rt]; ok {
		return nil
	}
	have := make([]string, 0, len(info.Runtimes))
	for name := range info.Runtimes {
		have = append(have, name)
	}
	slices.Sort(have)
	return missingRuntime(host, rt, have)
}

// missingRuntime is the health of an engine that does not list the
// configured runtime: drivers.ErrUnavailable for this config, with a
// sentence that names the runtimes the engine has and what to do.
func missingRuntime(host, rt string, have []string) error {
	list := strings.Join(have, ", ")
	if list == "" {
		list = "none"
	}
	return &errcode.Error{Target: "the Docker engine at " + host,
		Message: fmt.Sprintf("The Docker engine at %s has no runtime %q (it lists %s): register it in the engine's daemon.json, or change the environment's runtime setting.", host, rt, list),
		Err:     fmt.Errorf("docker %s: the engine has no runtime %q (runtimes: %s): %w", host, rt, list, drivers.ErrUnavailable)}
}
