package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/qualification"
)

var _ qualification.Store = (*DB)(nil)

const qualColumns = `company, environment_id, fingerprint, image, template,
	platform_os, platform_arch, platform_variant, platform_libc, platform_libc_version,
	platform_kernel, platform_release_id, platform_release_version, lease_id, recorded_at,
	invalidated_at, invalid_reason, isolation`

func scanQual(s scanner) (qualification.Record, error) {
	var r qualification.Record
	var image, libc string
	var recorded, invalidated sql.NullInt64
	p := &r.Platform
	if err := s.Scan(&r.Company, &r.Environment, &r.Fingerprint, &image, &r.Template,
		&p.OS, &p.Arch, &p.Variant, &libc, &p.LibcVersion,
		&p.Kernel, &p.ReleaseID, &p.ReleaseVersion, &r.LeaseID, &recorded,
		&invalidated, &r.InvalidReason, &r.Isolation); err != nil {
		return qualification.Record{}, err
	}
	p.Libc = qualification.LibcFamily(libc)
	id, err := images.ParseIdentity(image)
	if err != nil {
		return qualification.Record{}, fmt.Errorf("qualification of company %q for environment %q: image: %w", r.Company, r.Environment, err)
	}
	r.Image = id
	r.RecordedAt = fromNanos(recorded)
	r.InvalidatedAt = fromNanos(invalidated)
	return r, nil
}

// PutQualification implements qualification.Store with one upsert on the
// (company, environment) primary key, so that concurrent puts in any
// processes leave exactly one record per company and environment. A record
// without company or environment is refused before the database is
// touched.
func (db *DB) PutQualification(ctx context.Context, rec qualification.Record) error {
	if rec.Company == "" || rec.Environment == "" {
		return fmt.Errorf("sqlstore: put qualification: %w: company %q, environment %q: both are required", errcode.ErrInvalid, rec.Company, rec.Environment)
	}
	p := rec.Platform
	_, err := db.writes().exec(ctx, `INSERT INTO qualifications (`+qualColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (company, environment_id) DO UPDATE SET
			fingerprint = excluded.fingerprint, image = excluded.image, template = excluded.template,
			platform_os = excluded.platform_os, platform_arch = excluded.platform_arch,
			platform_variant = excluded.platform_variant, platform_libc = excluded.platform_libc,
			platform_libc_version = excluded.platform_libc_version, platform_kernel = excluded.platform_kernel,
			platform_release_id = excluded.platform_release_id,
			platform_release_version = excluded.platform_release_version,
			lease_id = excluded.lease_id, recorded_at = excluded.recorded_at,
			invalidated_at = excluded.invalidated_at, invalid_reason = excluded.invalid_reason,
			isolation = excluded.isolation`,
		rec.Company, rec.Environment, rec.Fingerprint, rec.Image.String(), rec.Template,
		p.OS, p.Arch, p.Variant, string(p.Libc), p.LibcVersion,
		p.Kernel, p.ReleaseID, p.ReleaseVersion, rec.LeaseID, nanos(rec.RecordedAt),
		nanos(rec.InvalidatedAt), rec.InvalidReason, rec.Isolation)
	if err != nil {
		return fmt.Errorf("sqlstore: put qualification of company %q for environment %q: %w", rec.Company, rec.Environment, err)
	}
	return nil
}

// GetQualification implements qualification.Store: the record of company
// for environment, or an error wrapping errcode.ErrNotFound. The
// look-up is by both keys, so another company's record is never returned
// (QUAL-4).
func (db *DB) GetQualification(ctx context.Context, company, environment string) (qualification.Record, error) {
	r, err := scanQual(db.reads().queryRow(ctx, "SELECT "+qualColumns+" FROM qualifications WHERE company = ? AND environment_id = ?", company, environment))
	if errors.Is(err, sql.ErrNoRows) {
		return qualification.Record{}, fmt.Errorf("sqlstore: qualification of company %q for environment %q: %w", company, environment, errcode.ErrNotFound)
	}
	if err != nil {
		return qualification.Record{}, fmt.Errorf("sqlstore: get qualification of company %q for environment %q: %w", company, environment, err)
	}
	return r, nil
}

// ListQualifications implements qualification.Store: every company's record
// for environment in byte order of company; an empty, non-nil list when
// there is none.
func (db *DB) ListQualifications(ctx context.Context, environment string) ([]qualification.Record, error) {
	rows, err := db.reads().query(ctx, "SELECT "+qualColumns+" FROM qualifications WHERE environment_id = ? ORDER BY company"+db.d.collateC(), environment)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list qualifications for environment %q: %w", environment, err)
	}
	return collect(rows, fmt.Sprintf("list qualifications for environment %q", environment), scanQual)
}

// DeleteQualifications implements qualification.Store: it removes every
// company's record for environment in one statement; none is not an error.
func (db *DB) DeleteQualifications(ctx context.Context, environment string) error {
	if _, err := db.writes().exec(ctx, "DELETE FROM qualifications WHERE environment_id = ?", environment); err != nil {
		return fmt.Errorf("sqlstore: delete qualifications for environment %q: %w", environment, err)
	}
	if _, err := db.writes().exec(ctx, "DELETE FROM qualification_last_tests WHERE environment_id = ?", environment); err != nil {
		return fmt.Errorf("sqlstore: delete last tests for environment %q: %w", environment, err)
	}
	return nil
}

// PutLastTest implements qualification.Store with one upsert on the
// (company, environment) primary key.
func (db *DB) PutLastTest(ctx context.Context, t qualification.LastTest) error {
	if t.Company == "" || t.Environment == "" {
		return fmt.Errorf("sqlstore: put last test: %w: company %q, environment %q: both are required", errcode.ErrInvalid, t.Company, t.Environment)
	}
	_, err := db.writes().exec(ctx, `INSERT INTO qualification_last_tests (company, environment_id, at, ok, code, message, failing_since)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (company, environment_id) DO UPDATE SET
			at = excluded.at, ok = excluded.ok, code = excluded.code,
			message = excluded.message, failing_since = excluded.failing_since`,
		t.Company, t.Environment, nanos(t.At), t.OK, t.Code, t.Message, nanos(t.FailingSince))
	if err != nil {
		return fmt.Errorf("sqlstore: put last test of company %q for environment %q: %w", t.Company, t.Environment, err)
	}
	return nil
}

// GetLastTest implements qualification.Store: the last test of company for
// environment, or an error wrapping errcode.ErrNotFound.
func (db *DB) GetLastTest(ctx context.Context, company, environment string) (qualification.LastTest, error) {
	t := qualification.LastTest{Company: company, Environment: environment}
	var at, since sql.NullInt64
	err := db.reads().queryRow(ctx, `SELECT at, ok, code, message, failing_since FROM qualification_last_tests
		WHERE company = ? AND environment_id = ?`, company, environment).Scan(&at, &t.OK, &t.Code, &t.Message, &since)
	if errors.Is(err, sql.ErrNoRows) {
		return qualification.LastTest{}, fmt.Errorf("sqlstore: last test of company %q for environment %q: %w", company, environment, errcode.ErrNotFound)
	}
	if err != nil {
		return qualification.LastTest{}, fmt.Errorf("sqlstore: get last test of company %q for environment %q: %w", company, environment, err)
	}
	t.At, t.FailingSince = fromNanos(at), fromNanos(since)
	return t, nil
}
