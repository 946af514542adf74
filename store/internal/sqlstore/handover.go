package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
)

var _ handover.Store = (*DB)(nil)

const authCheckColumns = `company, account_ref, version, status, fingerprint, provider_driver, provider_account,
	projects, environment, preparation, prepared_at, prepared_by, checked_at, checked_by, message`

func scanAuthCheck(s scanner) (handover.AuthCheck, error) {
	var c handover.AuthCheck
	var status, projects string
	var prepared, checked sql.NullInt64
	if err := s.Scan(&c.Company, &c.AccountRef, &c.Version, &status, &c.Fingerprint, &c.Provider.Driver, &c.Provider.Account,
		&projects, &c.Environment, &c.Preparation, &prepared, &c.PreparedBy, &checked, &c.CheckedBy, &c.Message); err != nil {
		return handover.AuthCheck{}, err
	}
	c.Status, c.PreparedAt, c.CheckedAt = handover.Status(status), fromNanos(prepared), fromNanos(checked)
	if err := json.Unmarshal([]byte(projects), &c.Projects); err != nil {
		return handover.AuthCheck{}, fmt.Errorf("projects of %s: %w", c.AccountRef, err)
	}
	if c.Projects == nil {
		c.Projects = []string{}
	}
	return c, nil
}

// PutAuthCheck implements handover.Store with one upsert on (company,
// account_ref).
func (db *DB) PutAuthCheck(ctx context.Context, c handover.AuthCheck) error {
	if c.Company == "" || c.AccountRef == "" {
		return fmt.Errorf("sqlstore: a project auth check needs a company and an account reference: %w", errcode.ErrInvalid)
	}
	projects := c.Projects
	if projects == nil {
		projects = []string{}
	}
	pj, err := json.Marshal(projects)
	if err != nil {
		return fmt.Errorf("sqlstore: project auth check of %s: %w", c.AccountRef, err)
	}
	_, err = db.writes().exec(ctx, `INSERT INTO auth_checks (`+authCheckColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (company, account_ref) DO UPDATE SET version = excluded.version, status = excluded.status,
			fingerprint = excluded.fingerprint, provider_driver = excluded.provider_driver,
			provider_account = excluded.provider_account, projects = excluded.projects,
			environment = excluded.environment, preparation = excluded.preparation,
			prepared_at = excluded.prepared_at, prepared_by = excluded.prepared_by,
			checked_at = excluded.checked_at, checked_by = excluded.checked_by, message = excluded.message`,
		c.Company, c.AccountRef, c.Version, string(c.Status), c.Fingerprint, c.Provider.Driver, c.Provider.Account,
		string(pj), c.Environment, c.Preparation, nanos(c.PreparedAt), c.PreparedBy, nanos(c.CheckedAt), c.CheckedBy, c.Message)
	if err != nil {
		return fmt.Errorf("sqlstore: put project auth check of %s for company %q: %w", c.AccountRef, c.Company, err)
	}
	return nil
}

// CompleteAuthCheck implements handover.Store: one conditional UPDATE on
// the preparation, so that an answer to a replaced preparation never
// lands, whichever process wrote the newer one.
func (db *DB) CompleteAuthCheck(ctx context.Context, company, accountRef, prep string, status handover.Status, checkedAt time.Time, checkedBy, message string) (handover.AuthCheck, error) {
	var out handover.AuthCheck
	err := db.inTx(ctx, func(tx handle) error {
		res, err := tx.exec(ctx, `UPDATE auth_checks SET status = ?, checked_at = ?, checked_by = ?, message = ?
			WHERE company = ? AND account_ref = ? AND preparation = ?`,
			string(status), nanos(checkedAt), checkedBy, message, company, accountRef, prep)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		out, err = scanAuthCheck(tx.queryRow(ctx, "SELECT "+authCheckColumns+" FROM auth_checks WHERE company = ? AND account_ref = ?", company, accountRef))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errcode.ErrNotFound
		case err != nil:
			return err
		case n == 0:
			return fmt.Errorf("preparation %s: %w", prep, handover.ErrStale)
		}
		return nil
	})
	if err != nil {
		return handover.AuthCheck{}, fmt.Errorf("sqlstore: complete project auth check of %s for company %q: %w", accountRef, company, err)
	}
	return out, nil
}

// GetAuthCheck implements handover.Store.
func (db *DB) GetAuthCheck(ctx context.Context, company, accountRef string) (handover.AuthCheck, error) {
	c, err := scanAuthCheck(db.reads().queryRow(ctx, "SELECT "+authCheckColumns+" FROM auth_checks WHERE company = ? AND account_ref = ?", company, accountRef))
	if errors.Is(err, sql.ErrNoRows) {
		return handover.AuthCheck{}, fmt.Errorf("sqlstore: project auth check of %s for company %q: %w", accountRef, company, errcode.ErrNotFound)
	}
	if err != nil {
		return handover.AuthCheck{}, fmt.Errorf("sqlstore: get project auth check of %s for company %q: %w", accountRef, company, err)
	}
	return c, nil
}

// ListAuthChecks implements handover.Store, sorted by company, then
// account reference, in byte order.
func (db *DB) ListAuthChecks(ctx context.Context, company string) ([]handover.AuthCheck, error) {
	c := db.d.collateC()
	rows, err := db.reads().query(ctx, "SELECT "+authCheckColumns+" FROM auth_checks WHERE ? = '' OR company = ? ORDER BY company"+c+", account_ref"+c, company, company)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list project auth checks: %w", err)
	}
	out, err := collect(rows, "list project auth checks", scanAuthCheck)
	if out == nil && err == nil {
		out = []handover.AuthCheck{}
	}
	return out, err
}

// DeleteAuthCheck implements handover.Store.
func (db *DB) DeleteAuthCheck(ctx context.Context, company, accountRef string) error {
	res, err := db.writes().exec(ctx, `DELETE FROM auth_checks WHERE company = ? AND account_ref = ?`, company, accountRef)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			return fmt.Errorf("sqlstore: project auth check of %s for company %q: %w", accountRef, company, errcode.ErrNotFound)
		}
	}
	if err != nil {
		return fmt.Errorf("sqlstore: delete project auth check of %s for company %q: %w", accountRef, company, err)
	}
	return nil
}
