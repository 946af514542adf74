package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/templates"
)

var _ templatehook.Records[*templates.Template, *templates.Session, *templates.Event, *templates.SessionEvent] = (*DB)(nil)

func wanted(t *templates.Template) int {
	if t.DeleteWanted {
		return 1
	}
	return 0
}

func scanTemplate(s scanner) (*templates.Template, error) {
	var doc string
	if err := s.Scan(&doc); err != nil {
		return nil, err
	}
	var t templates.Template
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return nil, fmt.Errorf("template document: %w", err)
	}
	return &t, nil
}

// InsertTemplate implements templatehook.Records.
func (db *DB) InsertTemplate(ctx context.Context, t *templates.Template) error {
	if t == nil || t.ID == "" {
		return fmt.Errorf("sqlstore: insert template: missing id: %w", errcode.ErrInvalid)
	}
	if t.Version != 1 {
		return fmt.Errorf("sqlstore: insert template %s: version %d, want 1: %w", t.ID, t.Version, errcode.ErrInvalid)
	}
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("sqlstore: insert template %s: %w", t.ID, err)
	}
	_, err = db.writes().exec(ctx, `INSERT INTO templates (id, environment, created_at, delete_wanted, version, doc) VALUES (?, ?, ?, ?, ?, ?)`,
		t.ID, t.Environment, nanos(t.CreatedAt), wanted(t), t.Version, string(doc))
	if _, dup := uniqueViolation(err); dup {
		return fmt.Errorf("sqlstore: template %s: id already exists: %w", t.ID, errcode.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: insert template %s: %w", t.ID, err)
	}
	return nil
}

// GetTemplate implements templatehook.Records.
func (db *DB) GetTemplate(ctx context.Context, id string) (*templates.Template, error) {
	t, err := scanTemplate(db.reads().queryRow(ctx, "SELECT doc FROM templates WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: template %q: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: get template %q: %w", id, err)
	}
	return t, nil
}

// ListTemplates implements templatehook.Records.
func (db *DB) ListTemplates(ctx context.Context, f templatehook.Filter) ([]*templates.Template, error) {
	q := "SELECT doc FROM templates WHERE 1 = 1"
	var args []any
	if f.Environment != "" {
		q += " AND environment = ?"
		args = append(args, f.Environment)
	}
	if f.DeleteWanted {
		q += " AND delete_wanted = 1"
	}
	q += " ORDER BY created_at, id" + db.d.collateC()
	rows, err := db.reads().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list templates: %w", err)
	}
	return collect(rows, "list templates", scanTemplate)
}

// UpdateTemplate implements templatehook.Records with one version-checked
// statement.
func (db *DB) UpdateTemplate(ctx context.Context, t *templates.Template) error {
	if t == nil || t.ID == "" {
		return fmt.Errorf("sqlstore: update template: missing id: %w", errcode.ErrInvalid)
	}
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("sqlstore: update template %s: %w", t.ID, err)
	}
	res, err := db.writes().exec(ctx, `UPDATE templates SET environment = ?, created_at = ?, delete_wanted = ?, version = ?, doc = ?
		WHERE id = ? AND version = ?`,
		t.Environment, nanos(t.CreatedAt), wanted(t), t.Version, string(doc), t.ID, t.Version-1)
	if err != nil {
		return fmt.Errorf("sqlstore: update template %s: %w", t.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	var stored int64
	err = db.writes().queryRow(ctx, "SELECT version FROM templates WHERE id = ?", t.ID).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlstore: template %q: %w", t.ID, errcode.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: update template %s: %w", t.ID, err)
	}
	return fmt.Errorf("sqlstore: template %s: version %d does not follow stored version %d: %w", t.ID, t.Version, stored, errcode.ErrConflict)
}

// AppendEvent implements templatehook.Records: the next seq of the environment in
// one transaction; two concurrent appends that pick the same seq collide
// on the primary key and the loser starts over.
func (db *DB) AppendEvent(ctx context.Context, e *templates.Event) error {
	if e == nil || e.Environment == "" {
		return fmt.Errorf("sqlstore: append event: missing environment: %w", errcode.ErrInvalid)
	}
	var err error
	for range maxKeyAttempts {
		ev := *e
		err = db.inTx(ctx, func(tx handle) error {
			if err := tx.queryRow(ctx, "SELECT COALESCE(MAX(seq), 0) + 1 FROM template_events WHERE environment = ?", ev.Environment).Scan(&ev.Seq); err != nil {
				return err
			}
			doc, err := json.Marshal(&ev)
			if err != nil {
				return err
			}
			_, err = tx.exec(ctx, "INSERT INTO template_events (environment, seq, doc) VALUES (?, ?, ?)", ev.Environment, ev.Seq, string(doc))
			return err
		})
		if err == nil {
			e.Seq = ev.Seq
			return nil
		}
		if _, dup := uniqueViolation(err); !dup {
			break
		}
	}
	return fmt.Errorf("sqlstore: append event of environment %s: %w", e.Environment, err)
}

// ListEvents implements templatehook.Records.
func (db *DB) ListEvents(ctx context.Context, environment string) ([]*templates.Event, error) {
	rows, err := db.reads().query(ctx, "SELECT doc FROM template_events WHERE environment = ? ORDER BY seq", environment)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: history of environment %s: %w", environment, err)
	}
	return collect(rows, "history of environment "+environment, func(s scanner) (*templates.Event, error) {
		var doc string
		if err := s.Scan(&doc); err != nil {
			return nil, err
		}
		var e templates.Event
		if err := json.Unmarshal([]byte(doc), &e); err != nil {
			return nil, fmt.Errorf("event document: %w", err)
		}
		return &e, nil
	})
}
