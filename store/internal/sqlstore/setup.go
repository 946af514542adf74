package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/templates"
)

func activeFlag(s *templates.Session) int {
	if s.State.Active() {
		return 1
	}
	return 0
}

// activeViolation reports whether a unique violation is the one-active-
// session index rather than the primary key.
func activeViolation(what string) bool {
	return strings.Contains(what, "setup_sessions_one_active") || strings.Contains(what, "setup_sessions.environment")
}

func scanSetupSession(s scanner) (*templates.Session, error) {
	var doc string
	if err := s.Scan(&doc); err != nil {
		return nil, err
	}
	var ses templates.Session
	if err := json.Unmarshal([]byte(doc), &ses); err != nil {
		return nil, fmt.Errorf("setup session document: %w", err)
	}
	return &ses, nil
}

// InsertSession implements templatehook.Records; the partial unique index
// setup_sessions_one_active refuses a second active session of an
// environment.
func (db *DB) InsertSession(ctx context.Context, s *templates.Session) error {
	if s == nil || s.ID == "" || s.Environment == "" {
		return fmt.Errorf("sqlstore: insert setup session: missing id or environment: %w", errcode.ErrInvalid)
	}
	if s.Version != 1 {
		return fmt.Errorf("sqlstore: insert setup session %s: version %d, want 1: %w", s.ID, s.Version, errcode.ErrInvalid)
	}
	doc, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("sqlstore: insert setup session %s: %w", s.ID, err)
	}
	_, err = db.writes().exec(ctx, `INSERT INTO setup_sessions (id, environment, active, created_at, version, doc) VALUES (?, ?, ?, ?, ?, ?)`,
		s.ID, s.Environment, activeFlag(s), nanos(s.CreatedAt), s.Version, string(doc))
	if what, dup := uniqueViolation(err); dup {
		if activeViolation(what) {
			return fmt.Errorf("sqlstore: setup session %s of environment %s: %w", s.ID, s.Environment, templates.ErrSessionActive)
		}
		return fmt.Errorf("sqlstore: setup session %s: id already exists: %w", s.ID, errcode.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: insert setup session %s: %w", s.ID, err)
	}
	return nil
}

// GetSession implements templatehook.Records.
func (db *DB) GetSession(ctx context.Context, id string) (*templates.Session, error) {
	s, err := scanSetupSession(db.reads().queryRow(ctx, "SELECT doc FROM setup_sessions WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: setup session %q: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: get setup session %q: %w", id, err)
	}
	return s, nil
}

// ListSessions implements templatehook.Records.
func (db *DB) ListSessions(ctx context.Context, f templatehook.Filter) ([]*templates.Session, error) {
	q := "SELECT doc FROM setup_sessions WHERE 1 = 1"
	var args []any
	if f.Environment != "" {
		q += " AND environment = ?"
		args = append(args, f.Environment)
	}
	if f.Active {
		q += " AND active = 1"
	}
	q += " ORDER BY created_at, id" + db.d.collateC()
	rows, err := db.reads().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: list setup sessions: %w", err)
	}
	return collect(rows, "list setup sessions", scanSetupSession)
}

// UpdateSession implements templatehook.Records with one version-checked
// statement.
func (db *DB) UpdateSession(ctx context.Context, s *templates.Session) error {
	if s == nil || s.ID == "" {
		return fmt.Errorf("sqlstore: update setup session: missing id: %w", errcode.ErrInvalid)
	}
	doc, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("sqlstore: update setup session %s: %w", s.ID, err)
	}
	res, err := db.writes().exec(ctx, `UPDATE setup_sessions SET active = ?, version = ?, doc = ? WHERE id = ? AND version = ?`,
		activeFlag(s), s.Version, string(doc), s.ID, s.Version-1)
	if what, dup := uniqueViolation(err); dup && activeViolation(what) {
		return fmt.Errorf("sqlstore: setup session %s of environment %s: %w", s.ID, s.Environment, templates.ErrSessionActive)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: update setup session %s: %w", s.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	var stored int64
	err = db.writes().queryRow(ctx, "SELECT version FROM setup_sessions WHERE id = ?", s.ID).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlstore: setup session %q: %w", s.ID, errcode.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: update setup session %s: %w", s.ID, err)
	}
	return fmt.Errorf("sqlstore: setup session %s: version %d does not follow stored version %d: %w", s.ID, s.Version, stored, errcode.ErrConflict)
}

// AppendSessionEvent implements templatehook.Records as AppendEvent does: the
// next seq in one transaction, a collision on the primary key retried.
func (db *DB) AppendSessionEvent(ctx context.Context, e *templates.SessionEvent) error {
	if e == nil || e.Session == "" {
		return fmt.Errorf("sqlstore: append session event: missing session: %w", errcode.ErrInvalid)
	}
	var err error
	for range maxKeyAttempts {
		ev := *e
		err = db.inTx(ctx, func(tx handle) error {
			if err := tx.queryRow(ctx, "SELECT COALESCE(MAX(seq), 0) + 1 FROM setup_session_events WHERE session = ?", ev.Session).Scan(&ev.Seq); err != nil {
				return err
			}
			doc, err := json.Marshal(&ev)
			if err != nil {
				return err
			}
			_, err = tx.exec(ctx, "INSERT INTO setup_session_events (session, seq, doc) VALUES (?, ?, ?)", ev.Session, ev.Seq, string(doc))
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
	return fmt.Errorf("sqlstore: append event of setup session %s: %w", e.Session, err)
}

// ListSessionEvents implements templatehook.Records.
func (db *DB) ListSessionEvents(ctx context.Context, session string, after int64) ([]*templates.SessionEvent, error) {
	rows, err := db.reads().query(ctx, "SELECT doc FROM setup_session_events WHERE session = ? AND seq > ? ORDER BY seq", session, after)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: events of setup session %s: %w", session, err)
	}
	return collect(rows, "events of setup session "+session, func(s scanner) (*templates.SessionEvent, error) {
		var doc string
		if err := s.Scan(&doc); err != nil {
			return nil, err
		}
		var e templates.SessionEvent
		if err := json.Unmarshal([]byte(doc), &e); err != nil {
			return nil, fmt.Errorf("session event document: %w", err)
		}
		return &e, nil
	})
}

// InsertTerminalToken implements templatehook.Records.
func (db *DB) InsertTerminalToken(ctx context.Context, t *templatehook.TerminalToken) error {
	if t == nil || t.Hash == "" {
		return fmt.Errorf("sqlstore: insert terminal token: missing hash: %w", errcode.ErrInvalid)
	}
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("sqlstore: insert terminal token of session %s: %w", t.Session, err)
	}
	_, err = db.writes().exec(ctx, "INSERT INTO setup_terminal_tokens (hash, expires_at, used, doc) VALUES (?, ?, 0, ?)",
		t.Hash, t.ExpiresAt.UnixNano(), string(doc))
	if _, dup := uniqueViolation(err); dup {
		return fmt.Errorf("sqlstore: terminal token of session %s: hash already exists: %w", t.Session, errcode.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: insert terminal token of session %s: %w", t.Session, err)
	}
	return nil
}

// PruneTerminalTokens implements templatehook.Records.
func (db *DB) PruneTerminalTokens(ctx context.Context, before time.Time) (int, error) {
	res, err := db.writes().exec(ctx, "DELETE FROM setup_terminal_tokens WHERE expires_at < ?", before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune terminal tokens: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune terminal tokens: %w", err)
	}
	return int(n), nil
}

// RedeemTerminalToken implements templatehook.Records with one conditional
// UPDATE: of concurrent redemptions exactly one changes the row. The hash
// binds the token to its principal and path (the principal, role and path
// columns of migration 3 stay empty).
func (db *DB) RedeemTerminalToken(ctx context.Context, hash string, now time.Time) (*templatehook.TerminalToken, error) {
	res, err := db.writes().exec(ctx, "UPDATE setup_terminal_tokens SET used = 1 WHERE hash = ? AND used = 0 AND expires_at > ?",
		hash, now.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("sqlstore: redeem terminal token: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, fmt.Errorf("sqlstore: redeem terminal token: %w", err)
	} else if n == 0 {
		return nil, fmt.Errorf("sqlstore: redeem terminal token: %w", templatehook.ErrTokenInvalid)
	}
	var doc string
	if err := db.writes().queryRow(ctx, "SELECT doc FROM setup_terminal_tokens WHERE hash = ?", hash).Scan(&doc); err != nil {
		return nil, fmt.Errorf("sqlstore: redeem terminal token: %w", err)
	}
	var t templatehook.TerminalToken
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return nil, fmt.Errorf("sqlstore: terminal token document: %w", err)
	}
	return &t, nil
}
