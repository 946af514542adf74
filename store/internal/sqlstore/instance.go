package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
)

var _ instance.Store = (*DB)(nil)

const settingsColumns = `enable_environments, managed_sandbox_only, quota_per_company, quota_per_company_environment, revision, updated_at, updated_by, minimum_isolation`

// GetSettings implements instance.Store: the one row, or an error wrapping
// errcode.ErrNotFound.
func (db *DB) GetSettings(ctx context.Context) (instance.Settings, error) {
	var s instance.Settings
	var at sql.NullInt64
	var minimum string
	err := db.reads().queryRow(ctx, "SELECT "+settingsColumns+" FROM instance_settings WHERE id = 1").
		Scan(&s.EnableEnvironments, &s.ManagedSandboxOnly, &s.QuotaPerCompany, &s.QuotaPerCompanyEnvironment, &s.Revision, &at, &s.UpdatedBy, &minimum)
	if errors.Is(err, sql.ErrNoRows) {
		return instance.Settings{}, fmt.Errorf("sqlstore: instance settings: %w", errcode.ErrNotFound)
	}
	if err != nil {
		return instance.Settings{}, fmt.Errorf("sqlstore: get instance settings: %w", err)
	}
	s.UpdatedAt = fromNanos(at)
	if minimum != "" {
		if err := s.MinimumIsolation.UnmarshalText([]byte(minimum)); err != nil {
			return instance.Settings{}, fmt.Errorf("sqlstore: instance settings: minimumIsolation: %w", err)
		}
	}
	return s, nil
}

// PutSettings implements instance.Store with one statement: the INSERT of
// revision 1 (ON CONFLICT DO NOTHING: the primary key lets one writer
// make it), or an UPDATE conditional on the revision before, so that two
// processes never both write one revision.
func (db *DB) PutSettings(ctx context.Context, s instance.Settings) error {
	if s.Revision < 1 {
		return fmt.Errorf("sqlstore: instance settings: field \"revision\": %d is not a stored revision (1, 2, ...): %w", s.Revision, errcode.ErrInvalid)
	}
	var (
		res sql.Result
		err error
	)
	minimum, err := s.MinimumIsolation.MarshalText()
	if err != nil {
		return fmt.Errorf("sqlstore: instance settings: field \"minimumIsolation\": %w: %w", err, errcode.ErrInvalid)
	}
	if s.Revision == 1 {
		res, err = db.writes().exec(ctx, `INSERT INTO instance_settings (id, `+settingsColumns+`) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`,
			s.EnableEnvironments, s.ManagedSandboxOnly, s.QuotaPerCompany, s.QuotaPerCompanyEnvironment, s.Revision, nanos(s.UpdatedAt), s.UpdatedBy, string(minimum))
	} else {
		res, err = db.writes().exec(ctx, `UPDATE instance_settings SET enable_environments = ?, managed_sandbox_only = ?,
			quota_per_company = ?, quota_per_company_environment = ?,
			revision = ?, updated_at = ?, updated_by = ?, minimum_isolation = ? WHERE id = 1 AND revision = ?`,
			s.EnableEnvironments, s.ManagedSandboxOnly, s.QuotaPerCompany, s.QuotaPerCompanyEnvironment, s.Revision, nanos(s.UpdatedAt), s.UpdatedBy, string(minimum), s.Revision-1)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: put instance settings at revision %d: %w", s.Revision, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlstore: put instance settings at revision %d: %w", s.Revision, err)
	}
	if n == 0 {
		return fmt.Errorf("sqlstore: put instance settings at revision %d: the stored revision is not %d: %w", s.Revision, s.Revision-1, errcode.ErrConflict)
	}
	return nil
}
