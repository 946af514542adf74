package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

var _ environment.HealthStore = (*DB)(nil)

const healthColumns = `driver, endpoint, available, code, reason, checked_at`

func scanHealth(s scanner) (environment.ProviderHealth, error) {
	var h environment.ProviderHealth
	var code string
	var at sql.NullInt64
	if err := s.Scan(&h.Driver, &h.Endpoint, &h.Available, &code, &h.Reason, &at); err != nil {
		return environment.ProviderHealth{}, err
	}
	h.Code, h.CheckedAt = string(code), fromNanos(at)
	return h, nil
}

// PutProviderHealth implements environment.HealthStore with one upsert on
// the (driver, endpoint) key, so the last write of any process wins.
func (db *DB) PutProviderHealth(ctx context.Context, h environment.ProviderHealth) error {
	if h.Driver == "" || h.Endpoint == "" {
		return fmt.Errorf("sqlstore: provider health needs a driver and an endpoint: %w", errcode.ErrInvalid)
	}
	_, err := db.writes().exec(ctx, `INSERT INTO provider_health (`+healthColumns+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (driver, endpoint) DO UPDATE SET available = excluded.available, code = excluded.code,
			reason = excluded.reason, checked_at = excluded.checked_at`,
		h.Driver, h.Endpoint, h.Available, string(h.Code), h.Reason, nanos(h.CheckedAt))
	if err != nil {
		return fmt.Errorf("sqlstore: put health of provider %s at %s: %w", h.Driver, h.Endpoint, err)
	}
	return nil
}

// GetProviderHealth implements environment.HealthStore: the record of
// driver and endpoint, or an error wrapping errcode.ErrNotFound.
func (db *DB) GetProviderHealth(ctx context.Context, driver, endpoint string) (environment.ProviderHealth, error) {
	h, err := scanHealth(db.reads().queryRow(ctx, "SELECT "+healthColumns+" FROM provider_health WHERE driver = ? AND endpoint = ?", driver, endpoint))
	if errors.Is(err, sql.ErrNoRows) {
		return environment.ProviderHealth{}, fmt.Errorf("sqlstore: health of provider %s at %s: %w", driver, endpoint, errcode.ErrNotFound)
	}
	if err != nil {
		return environment.ProviderHealth{}, fmt.Errorf("sqlstore: get health of provider %s at %s: %w", driver, endpoint, err)
	}
	return h, nil
}

// ListProviderHealth implements environment.HealthStore, sorted by driver,
// then endpoint, in byte order.
func (db *DB) ListProviderHealth(ctx context.Context) ([]environment.ProviderHealth, error) {
	c := db.d.collateC()
	rows, err := db.reads().query(ctx, "SELECT "+healthColumns+" FROM provider_health ORDER BY driver"+c+", endpoint"+c)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list provider health: %w", err)
	}
	return collect(rows, "list provider health", scanHealth)
}
