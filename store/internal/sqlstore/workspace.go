package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/workspace"
)

var _ workspacehook.Records[*workspace.Workspace] = (*DB)(nil)

func liveFlag(w *workspace.Workspace) int {
	if w.State == workspace.StateEnded {
		return 0
	}
	return 1
}

func scanWorkspace(s scanner) (*workspace.Workspace, error) {
	var doc string
	if err := s.Scan(&doc); err != nil {
		return nil, err
	}
	var w workspace.Workspace
	if err := json.Unmarshal([]byte(doc), &w); err != nil {
		return nil, fmt.Errorf("workspace document: %w", err)
	}
	return &w, nil
}

// InsertWorkspace implements workspacehook.Records; the primary key and the
// partial unique index workspaces_one_live refuse a taken id and a second
// live record of an owner's key.
func (db *DB) InsertWorkspace(ctx context.Context, w *workspace.Workspace) error {
	if err := workspacehook.Validate(w); err != nil {
		return fmt.Errorf("sqlstore: insert %w", err)
	}
	if w.State != workspace.StatePreparing || w.Revision != 1 {
		return fmt.Errorf("sqlstore: insert workspace %s: %s at revision %d, want preparing at 1 (write-ahead): %w", w.ID, w.State, w.Revision, errcode.ErrInvalid)
	}
	doc, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("sqlstore: insert workspace %s: %w", w.ID, err)
	}
	_, err = db.writes().exec(ctx, `INSERT INTO workspaces (id, company, project, ws_key, lease, state, live, created_at, revision, doc)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.Company, w.Project, w.Key, w.Lease, string(w.State), liveFlag(w), nanos(w.CreatedAt), w.Revision, string(doc))
	if _, dup := uniqueViolation(err); dup {
		return fmt.Errorf("sqlstore: workspace %s: the id is taken or key %q of company %s, project %q is live: %w", w.ID, w.Key, w.Company, w.Project, errcode.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: insert workspace %s: %w", w.ID, err)
	}
	return nil
}

// GetWorkspace implements workspacehook.Records.
func (db *DB) GetWorkspace(ctx context.Context, id string) (*workspace.Workspace, error) {
	return db.getWorkspace(ctx, db.reads(), id)
}

func (db *DB) getWorkspace(ctx context.Context, h handle, id string) (*workspace.Workspace, error) {
	w, err := scanWorkspace(h.queryRow(ctx, "SELECT doc FROM workspaces WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: workspace %q: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: get workspace %q: %w", id, err)
	}
	return w, nil
}

// FindWorkspace implements workspacehook.Records: the live record of key within
// exactly this company and project.
func (db *DB) FindWorkspace(ctx context.Context, company, project, key string) (*workspace.Workspace, error) {
	w, err := scanWorkspace(db.reads().queryRow(ctx,
		"SELECT doc FROM workspaces WHERE company = ? AND project = ? AND ws_key = ? AND live = 1", company, project, key))
	if errors.Is(err, sql.ErrNoRows) || err == nil && company == "" {
		return nil, fmt.Errorf("sqlstore: workspace key %q of company %q, project %q: %w", key, company, project, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: find workspace key %q of company %q, project %q: %w", key, company, project, err)
	}
	return w, nil
}

// ListWorkspaces implements workspacehook.Records.
func (db *DB) ListWorkspaces(ctx context.Context, f workspacehook.Filter) ([]*workspace.Workspace, error) {
	q := "SELECT doc FROM workspaces WHERE 1 = 1"
	var args []any
	if f.Company != "" {
		q += " AND company = ? AND project = ?"
		args = append(args, f.Company, f.Project)
	}
	if f.Lease != "" {
		q += " AND lease = ?"
		args = append(args, f.Lease)
	}
	if f.State != "" {
		q += " AND state = ?"
		args = append(args, string(f.State))
	}
	q += " ORDER BY created_at, id" + db.d.collateC()
	rows, err := db.reads().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list workspaces: %w", err)
	}
	return collect(rows, "list workspaces", scanWorkspace)
}

// UpdateWorkspace implements workspacehook.Records: the stored record is read,
// w checked against it (workspacehook.Follows), and written with one
// statement conditioned on the stored revision, so of concurrent updates
// from one revision one wins.
func (db *DB) UpdateWorkspace(ctx context.Context, w *workspace.Workspace) error {
	if err := workspacehook.Validate(w); err != nil {
		return fmt.Errorf("sqlstore: update %w", err)
	}
	cur, err := db.getWorkspace(ctx, db.writes(), w.ID)
	if err != nil {
		return err
	}
	if err := workspacehook.Follows(w, cur); err != nil {
		return fmt.Errorf("sqlstore: %w", err)
	}
	doc, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("sqlstore: update workspace %s: %w", w.ID, err)
	}
	res, err := db.writes().exec(ctx, `UPDATE workspaces SET lease = ?, state = ?, live = ?, revision = ?, doc = ? WHERE id = ? AND revision = ?`,
		w.Lease, string(w.State), liveFlag(w), w.Revision, string(doc), w.ID, cur.Revision)
	if err != nil {
		return fmt.Errorf("sqlstore: update workspace %s: %w", w.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	return fmt.Errorf("sqlstore: workspace %s: revision %d was updated meanwhile: %w", w.ID, cur.Revision, errcode.ErrConflict)
}
