package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

var _ environment.Store = (*DB)(nil)

const envColumns = `id, name, description, driver, status, config, env, metadata,
	revision, created_at, updated_at, created_by, updated_by, active_template, pool, require_isolation`

// envRow is an Environment in column form.
type envRow struct {
	config, env, metadata, template, pool sql.NullString
	created, updated                      sql.NullInt64
	isolation                             string // drivers.Isolation's name; "" for none
}

// storedTemplate is the active_template column's JSON form: the pointer
// with its source fingerprint, without the drift (computed by reads).
type storedTemplate struct {
	ID                string `json:"id"`
	Identity          string `json:"identity"`
	SourceFingerprint string `json:"sourceFingerprint"`
}

func encodeEnv(e *environment.Environment) (envRow, error) {
	var r envRow
	var err error
	if r.config, err = jsonText(e.Config); err != nil {
		return r, fmt.Errorf("config: %w", err)
	}
	if r.env, err = jsonText(e.Env); err != nil {
		return r, fmt.Errorf("env: %w", err)
	}
	if r.metadata, err = jsonText(e.Metadata); err != nil {
		return r, fmt.Errorf("metadata: %w", err)
	}
	if t := e.ActiveTemplate; t != nil {
		if r.template, err = jsonText(storedTemplate{t.ID, t.Identity, t.SourceFingerprint}); err != nil {
			return r, fmt.Errorf("activeTemplate: %w", err)
		}
	}
	if e.Pool != nil {
		if r.pool, err = jsonText(e.Pool); err != nil {
			return r, fmt.Errorf("pool: %w", err)
		}
	}
	if e.RequireIsolation != 0 {
		t, err := e.RequireIsolation.MarshalText()
		if err != nil {
			return r, fmt.Errorf("requireIsolation: %w", err)
		}
		r.isolation = string(t)
	}
	r.created, r.updated = nanos(e.CreatedAt), nanos(e.UpdatedAt)
	return r, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanEnv(s scanner) (*environment.Environment, error) {
	var e environment.Environment
	var r envRow
	var status string
	if err := s.Scan(&e.ID, &e.Name, &e.Description, &e.Driver, &status, &r.config, &r.env, &r.metadata,
		&e.Revision, &r.created, &r.updated, &e.CreatedBy, &e.UpdatedBy, &r.template, &r.pool, &r.isolation); err != nil {
		return nil, err
	}
	e.Status = environment.Status(status)
	if err := fromJSONText(r.config, &e.Config); err != nil {
		return nil, fmt.Errorf("environment %q: config: %w", e.ID, err)
	}
	if err := fromJSONText(r.env, &e.Env); err != nil {
		return nil, fmt.Errorf("environment %q: env: %w", e.ID, err)
	}
	if err := fromJSONText(r.metadata, &e.Metadata); err != nil {
		return nil, fmt.Errorf("environment %q: metadata: %w", e.ID, err)
	}
	if r.template.Valid {
		var t storedTemplate
		if err := fromJSONText(r.template, &t); err != nil {
			return nil, fmt.Errorf("environment %q: activeTemplate: %w", e.ID, err)
		}
		e.ActiveTemplate = &environment.ActiveTemplate{ID: t.ID, Identity: t.Identity, SourceFingerprint: t.SourceFingerprint}
	}
	if r.isolation != "" {
		if err := e.RequireIsolation.UnmarshalText([]byte(r.isolation)); err != nil {
			return nil, fmt.Errorf("environment %q: requireIsolation: %w", e.ID, err)
		}
	}
	if r.pool.Valid {
		var p environment.Pool
		if err := fromJSONText(r.pool, &p); err != nil {
			return nil, fmt.Errorf("environment %q: pool: %w", e.ID, err)
		}
		e.Pool = &p
	}
	e.CreatedAt, e.UpdatedAt = fromNanos(r.created), fromNanos(r.updated)
	return &e, nil
}

// envConflict turns a unique violation into an error wrapping
// errcode.ErrConflict that says which value is taken.
func envConflict(op string, e *environment.Environment, err error) error {
	what, ok := uniqueViolation(err)
	if !ok {
		return nil
	}
	switch {
	case strings.Contains(what, "exclusive"):
		return fmt.Errorf("sqlstore: %s environment %q: driver %q allows one environment per instance: %w", op, e.ID, e.Driver, errcode.ErrConflict)
	case strings.Contains(what, "name"):
		return fmt.Errorf("sqlstore: %s environment %q: name %q is taken: %w", op, e.ID, e.Name, errcode.ErrConflict)
	default:
		return fmt.Errorf("sqlstore: %s environment %q: id is taken: %w", op, e.ID, errcode.ErrConflict)
	}
}

// CreateEnvironment implements environment.Store. With exclusiveDriver
// it refuses the environment when one of the same driver exists; two
// concurrent exclusive creates (in any processes) cannot both succeed
// because the record carries the driver in a unique column.
func (db *DB) CreateEnvironment(ctx context.Context, e *environment.Environment, exclusiveDriver bool) error {
	if e == nil || e.ID == "" {
		return fmt.Errorf("sqlstore: create environment: empty id: %w", errcode.ErrInvalid)
	}
	if e.Revision != 1 {
		return fmt.Errorf("sqlstore: create environment %q: revision %d, want 1: %w", e.ID, e.Revision, errcode.ErrInvalid)
	}
	r, err := encodeEnv(e)
	if err != nil {
		return fmt.Errorf("sqlstore: create environment %q: %w: %w", e.ID, errcode.ErrInvalid, err)
	}
	var exclusive sql.NullString
	if exclusiveDriver {
		exclusive = sql.NullString{String: e.Driver, Valid: true}
	}
	insert := func(h handle) error {
		_, err := h.exec(ctx, `INSERT INTO environments (`+envColumns+`, exclusive_key)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.ID, e.Name, e.Description, e.Driver, string(e.Status), r.config, r.env, r.metadata,
			e.Revision, r.created, r.updated, e.CreatedBy, e.UpdatedBy, r.template, r.pool, r.isolation, exclusive)
		return err
	}
	if !exclusiveDriver {
		err = insert(db.writes())
	} else {
		// The check sees environments created without the option; the
		// unique exclusive_key decides between concurrent exclusive
		// creates, which the check alone could not (READ COMMITTED).
		err = db.inTx(ctx, func(tx handle) error {
			var n int
			if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM environments WHERE driver = ?", e.Driver).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("sqlstore: create environment %q: driver %q allows one environment per instance: %w", e.ID, e.Driver, errcode.ErrConflict)
			}
			return insert(tx)
		})
	}
	if err == nil || errors.Is(err, errcode.ErrConflict) {
		return err
	}
	if cerr := envConflict("create", e, err); cerr != nil {
		return cerr
	}
	return fmt.Errorf("sqlstore: create environment %q: %w", e.ID, err)
}

// GetEnvironment implements environment.Store.
func (db *DB) GetEnvironment(ctx context.Context, id string) (*environment.Environment, error) {
	e, err := scanEnv(db.reads().queryRow(ctx, "SELECT "+envColumns+" FROM environments WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: environment %q: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: get environment %q: %w", id, err)
	}
	return e, nil
}

// ListEnvironments implements environment.Store: matching environments by
// name, then id, in byte order.
func (db *DB) ListEnvironments(ctx context.Context, f environment.ListFilter) ([]*environment.Environment, error) {
	q := "SELECT " + envColumns + " FROM environments WHERE 1 = 1"
	var args []any
	if f.Driver != "" {
		q += " AND driver = ?"
		args = append(args, f.Driver)
	}
	if f.Status != "" {
		q += " AND status = ?"
		args = append(args, string(f.Status))
	}
	q += " ORDER BY name" + db.d.collateC() + ", id" + db.d.collateC()
	rows, err := db.reads().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list environments: %w", err)
	}
	defer rows.Close()
	var out []*environment.Environment
	for rows.Next() {
		e, err := scanEnv(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: list environments: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: list environments: %w", err)
	}
	return out, nil
}

// changedOne returns nil if the revision-checked statement behind res
// changed a row, else why not: ErrNotFound if id is absent, ErrConflict with
// the stored revision if it is not base. The look-up runs after the
// statement; a record deleted in between is reported not found, which is
// also true.
func (db *DB) changedOne(ctx context.Context, res sql.Result, op, id string, base int64) error {
	n, err := res.RowsAffected()
	if err != nil || n > 0 {
		return err
	}
	var stored int64
	err = db.writes().queryRow(ctx, "SELECT revision FROM environments WHERE id = ?", id).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlstore: %s environment %q: %w", op, id, errcode.ErrNotFound)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("sqlstore: %s environment %q: stale revision %d (stored %d): %w", op, id, base, stored, errcode.ErrConflict)
}

// UpdateEnvironment implements environment.Store with one revision-checked
// statement (UPDATE ... WHERE id = ? AND revision = ?), so that of
// concurrent updates from one base revision exactly one wins, in any
// process. An
// environment created exclusive stays exclusive for its (new) driver.
func (db *DB) UpdateEnvironment(ctx context.Context, e *environment.Environment, baseRevision int64) error {
	if e == nil || e.ID == "" {
		return fmt.Errorf("sqlstore: update environment: empty id: %w", errcode.ErrInvalid)
	}
	if e.Revision != baseRevision+1 {
		return fmt.Errorf("sqlstore: update environment %q: revision %d does not follow base revision %d: %w", e.ID, e.Revision, baseRevision, errcode.ErrConflict)
	}
	r, err := encodeEnv(e)
	if err != nil {
		return fmt.Errorf("sqlstore: update environment %q: %w: %w", e.ID, errcode.ErrInvalid, err)
	}
	res, err := db.writes().exec(ctx, `UPDATE environments SET name = ?, description = ?, driver = ?, status = ?,
		config = ?, env = ?, metadata = ?, revision = ?, created_at = ?, updated_at = ?,
		created_by = ?, updated_by = ?, active_template = ?, pool = ?, require_isolation = ?,
		exclusive_key = CASE WHEN exclusive_key IS NULL THEN NULL ELSE ? END
		WHERE id = ? AND revision = ?`,
		e.Name, e.Description, e.Driver, string(e.Status), r.config, r.env, r.metadata,
		e.Revision, r.created, r.updated, e.CreatedBy, e.UpdatedBy, r.template, r.pool, r.isolation, e.Driver,
		e.ID, baseRevision)
	if err == nil {
		err = db.changedOne(ctx, res, "update", e.ID, baseRevision)
	}
	if err == nil || errors.Is(err, errcode.ErrConflict) || errors.Is(err, errcode.ErrNotFound) {
		return err
	}
	if cerr := envConflict("update", e, err); cerr != nil {
		return cerr
	}
	return fmt.Errorf("sqlstore: update environment %q: %w", e.ID, err)
}

// DeleteEnvironment implements environment.Store with one revision-checked
// DELETE.
func (db *DB) DeleteEnvironment(ctx context.Context, id string, baseRevision int64) error {
	res, err := db.writes().exec(ctx, "DELETE FROM environments WHERE id = ? AND revision = ?", id, baseRevision)
	if err == nil {
		err = db.changedOne(ctx, res, "delete", id, baseRevision)
	}
	if err == nil || errors.Is(err, errcode.ErrConflict) || errors.Is(err, errcode.ErrNotFound) {
		return err
	}
	return fmt.Errorf("sqlstore: delete environment %q: %w", id, err)
}

// collect scans every row of rows with scan and closes rows; errors wrap
// what. It returns an empty, non-nil slice when there is no row.
func collect[T any](rows *sql.Rows, what string, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: %s: %w", what, err)
	}
	return out, nil
}
