package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

var _ drivers.HealthChecker = (*driver)(nil)

// Endpoint implements drivers.HealthChecker: the API URL and the account,
// named by the API key's secret reference ("https://app.daytona.io/api
// account secret:sec_1@v2"). A config holding a pasted key (a draft) names
// no account: the key itself is never part of an endpoint. No I/O.
func (d *driver) Endpoint(cfg config.Config) string {
	api := cfg.String(fieldAPIURL)
	if api == "" {
		if f, ok := d.schema.Field(fieldAPIURL); ok {
			api, _ = f.Default.(string)
		}
	}
	if api == "" {
		return ""
	}
	if ref, ok := cfg.SecretRef(fieldAPIKey); ok {
		return api + " account " + ref.String()
	}
	return api + " account (unsaved key)"
}

// CheckHealth implements drivers.HealthChecker with two bounded reads that
// allocate nothing: the API's public liveness route (GET /health, public in
// v0.190.0 apps/api/src/health/health.controller.ts; /health/ready needs a
// health-check role that user keys lack), then one page of at most one
// sandbox with the account's key. An API that cannot be reached, answers
// 5xx or is not live is drivers.ErrUnavailable; a refused key is
// drivers.ErrAuth; a certificate that fails verification is
// drivers.ErrTLSUnverified. No retry: the next measurement is the retry.
func (d *driver) CheckHealth(ctx context.Context, cfg config.Config) error {
	s, err := d.open(cfg)
	if err != nil {
		return err
	}
	c := s.c
	var live struct {
		Status string `json:"status"`
	}
	if err := c.sendPublic(ctx, "health", &live); err != nil {
		return healthErr(err)
	}
	if live.Status != "ok" {
		return fmt.Errorf("daytona: GET /health at %s: status %q: %w", c.api.Host, live.Status, drivers.ErrUnavailable)
	}
	var page apiListSandboxes
	if err := c.send(ctx, c.api, http.MethodGet, "sandbox", url.Values{"limit": {"1"}}, nil, &page); err != nil {
		return healthErr(err)
	}
	return nil
}

// healthErr classifies a failed health read: identity and credential
// failures keep their sentinel; anything else means the control plane does
// not serve (ErrUnavailable).
func healthErr(err error) error {
	switch {
	case errors.Is(err, drivers.ErrTLSUnverified), errors.Is(err, drivers.ErrAuth),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return fmt.Errorf("%w: %w", drivers.ErrUnavailable, err)
}
