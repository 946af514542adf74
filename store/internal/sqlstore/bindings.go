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

var _ environment.BindingStore = (*DB)(nil)

const bindingColumns = `kind, binding_key, company, environment_id, revision,
	created_at, updated_at, created_by, updated_by`

func scanBinding(s scanner) (*environment.Binding, error) {
	var b environment.Binding
	var kind string
	var created, updated sql.NullInt64
	if err := s.Scan(&kind, &b.Key, &b.Company, &b.EnvironmentID, &b.Revision,
		&created, &updated, &b.CreatedBy, &b.UpdatedBy); err != nil {
		return nil, err
	}
	b.Kind = environment.BindingKind(kind)
	b.CreatedAt, b.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &b, nil
}

// PutBinding implements environment.BindingStore: an INSERT for
// baseRevision 0 (the primary key on kind, company and key refuses a second binding,
// in any process), else one revision-checked UPDATE, so that of concurrent
// writers from one base revision exactly one wins.
func (db *DB) PutBinding(ctx context.Context, b *environment.Binding, baseRevision int64) error {
	if b == nil {
		return fmt.Errorf("sqlstore: put binding: nil binding: %w", errcode.ErrInvalid)
	}
	if err := b.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put binding: %w", err)
	}
	if baseRevision < 0 || b.Revision != baseRevision+1 {
		return fmt.Errorf("sqlstore: put %s: revision %d does not follow base revision %d: %w", b, b.Revision, baseRevision, errcode.ErrConflict)
	}
	if baseRevision == 0 {
		_, err := db.writes().exec(ctx, `INSERT INTO environment_bindings (`+bindingColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			string(b.Kind), b.Key, b.Company, b.EnvironmentID, b.Revision,
			nanos(b.CreatedAt), nanos(b.UpdatedAt), b.CreatedBy, b.UpdatedBy)
		if _, dup := uniqueViolation(err); dup {
			return fmt.Errorf("sqlstore: put %s: it already exists: %w", b, errcode.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlstore: put %s: %w", b, err)
		}
		return nil
	}
	res, err := db.writes().exec(ctx, `UPDATE environment_bindings SET environment_id = ?,
		revision = ?, created_at = ?, updated_at = ?, created_by = ?, updated_by = ?
		WHERE kind = ? AND company = ? AND binding_key = ? AND revision = ?`,
		b.EnvironmentID, b.Revision, nanos(b.CreatedAt), nanos(b.UpdatedAt), b.CreatedBy, b.UpdatedBy,
		string(b.Kind), b.Company, b.Key, baseRevision)
	if err == nil {
		err = db.bindingChanged(ctx, res, "put", b.BindingRef, baseRevision)
	}
	if err == nil || errors.Is(err, errcode.ErrConflict) || errors.Is(err, errcode.ErrNotFound) {
		return err
	}
	return fmt.Errorf("sqlstore: put %s: %w", b, err)
}

// bindingChanged returns nil if the revision-checked statement behind res
// changed a row, else ErrNotFound or ErrConflict (see changedOne).
func (db *DB) bindingChanged(ctx context.Context, res sql.Result, op string, ref environment.BindingRef, base int64) error {
	n, err := res.RowsAffected()
	if err != nil || n > 0 {
		return err
	}
	var stored int64
	err = db.writes().queryRow(ctx, "SELECT revision FROM environment_bindings WHERE kind = ? AND company = ? AND binding_key = ?",
		string(ref.Kind), ref.Company, ref.Key).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlstore: %s %s: %w", op, environment.Binding{BindingRef: ref}, errcode.ErrNotFound)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("sqlstore: %s %s: stale revision %d (stored %d): %w", op, environment.Binding{BindingRef: ref}, base, stored, errcode.ErrConflict)
}

// GetBinding implements environment.BindingStore.
func (db *DB) GetBinding(ctx context.Context, ref environment.BindingRef) (*environment.Binding, error) {
	b, err := scanBinding(db.reads().queryRow(ctx, "SELECT "+bindingColumns+
		" FROM environment_bindings WHERE kind = ? AND company = ? AND binding_key = ?", string(ref.Kind), ref.Company, ref.Key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: %s: %w", environment.Binding{BindingRef: ref}, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: get %s: %w", environment.Binding{BindingRef: ref}, err)
	}
	return b, nil
}

// DeleteBinding implements environment.BindingStore with one
// revision-checked DELETE.
func (db *DB) DeleteBinding(ctx context.Context, ref environment.BindingRef, baseRevision int64) error {
	res, err := db.writes().exec(ctx, "DELETE FROM environment_bindings WHERE kind = ? AND company = ? AND binding_key = ? AND revision = ?",
		string(ref.Kind), ref.Company, ref.Key, baseRevision)
	if err == nil {
		err = db.bindingChanged(ctx, res, "delete", ref, baseRevision)
	}
	if err == nil || errors.Is(err, errcode.ErrConflict) || errors.Is(err, errcode.ErrNotFound) {
		return err
	}
	return fmt.Errorf("sqlstore: delete %s: %w", environment.Binding{BindingRef: ref}, err)
}

// ListBindings implements environment.BindingStore: matching bindings by
// kind, then key, then company, in byte order.
func (db *DB) ListBindings(ctx context.Context, f environment.BindingFilter) ([]*environment.Binding, error) {
	q := "SELECT " + bindingColumns + " FROM environment_bindings WHERE 1 = 1"
	var args []any
	if f.Kind != "" {
		q += " AND kind = ?"
		args = append(args, string(f.Kind))
	}
	if f.Company != "" {
		q += " AND company = ?"
		args = append(args, f.Company)
	}
	if f.EnvironmentID != "" {
		q += " AND environment_id = ?"
		args = append(args, f.EnvironmentID)
	}
	q += " ORDER BY kind" + db.d.collateC() + ", binding_key" + db.d.collateC() + ", company" + db.d.collateC()
	rows, err := db.reads().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list bindings: %w", err)
	}
	defer rows.Close()
	var out []*environment.Binding
	for rows.Next() {
		b, err := scanBinding(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: list bindings: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: list bindings: %w", err)
	}
	return out, nil
}

// DeleteEnvironmentBindings implements environment.BindingStore with one
// DELETE.
func (db *DB) DeleteEnvironmentBindings(ctx context.Context, envID string) (int, error) {
	res, err := db.writes().exec(ctx, "DELETE FROM environment_bindings WHERE environment_id = ?", envID)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: delete the bindings of environment %q: %w", envID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: delete the bindings of environment %q: %w", envID, err)
	}
	return int(n), nil
}

// DB has environment.BindingStore's optional one-read method (see there).
var _ interface {
	GetEnvironmentBindings(ctx context.Context, id string) (*environment.Environment, []*environment.Binding, error)
} = (*DB)(nil)

// targetSQL reads an environment and the bindings that point at it: one
// row per binding, or one row with an empty kind when there is none.
var targetSQL = "SELECT " + qualified(envColumns, "e") + `,
	COALESCE(b.kind, ''), COALESCE(b.binding_key, ''), COALESCE(b.company, ''), COALESCE(b.environment_id, ''),
	COALESCE(b.revision, 0), b.created_at, b.updated_at, COALESCE(b.created_by, ''), COALESCE(b.updated_by, '')
	FROM environments e LEFT JOIN environment_bindings b ON b.environment_id = e.id
	WHERE e.id = ?`

// qualified prefixes every column of the comma-separated list cols with
// alias and a dot.
func qualified(cols, alias string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// GetEnvironmentBindings is environment.BindingStore's optional one-read
// method, in one statement (a LEFT JOIN), so in one snapshot.
func (db *DB) GetEnvironmentBindings(ctx context.Context, id string) (*environment.Environment, []*environment.Binding, error) {
	q := targetSQL + " ORDER BY b.kind" + db.d.collateC() + ", b.binding_key" + db.d.collateC() + ", b.company" + db.d.collateC()
	rows, err := db.reads().query(ctx, q, id)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlstore: get environment %q and its bindings: %w", id, err)
	}
	defer rows.Close()
	var env *environment.Environment
	bs := []*environment.Binding{}
	for rows.Next() {
		// scanEnv's Scan is scanBinding's, whose Scan reads the row: each
		// converts its columns after the row is read.
		var e *environment.Environment
		var b *environment.Binding
		var berr error
		e, err = scanEnv(scanFunc(func(envDest ...any) error {
			b, berr = scanBinding(scanFunc(func(bindDest ...any) error {
				return rows.Scan(append(envDest[:len(envDest):len(envDest)], bindDest...)...)
			}))
			return berr
		}))
		if err != nil {
			return nil, nil, fmt.Errorf("sqlstore: get environment %q and its bindings: %w", id, err)
		}
		env = e
		if b.Kind != "" {
			bs = append(bs, b)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("sqlstore: get environment %q and its bindings: %w", id, err)
	}
	if env == nil {
		return nil, nil, fmt.Errorf("sqlstore: environment %q: %w", id, errcode.ErrNotFound)
	}
	return env, bs, nil
}

// scanFunc is a scanner that is a function.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }
