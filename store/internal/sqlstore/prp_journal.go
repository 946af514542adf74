package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

const commandColumns = `session, seq, command, state, result, created_at, updated_at`

func scanCommand(sc scanner) (controller.CommandRecord, error) {
	var r controller.CommandRecord
	var cmd, result sql.NullString
	var state string
	var created, updated sql.NullInt64
	if err := sc.Scan(&r.Session, &r.Seq, &cmd, &state, &result, &created, &updated); err != nil {
		return controller.CommandRecord{}, err
	}
	if err := fromJSONText(cmd, &r.Command); err != nil {
		return controller.CommandRecord{}, fmt.Errorf("command: %w", err)
	}
	if result.Valid {
		r.Result = &prp.Result{}
		if err := fromJSONText(result, r.Result); err != nil {
			return controller.CommandRecord{}, fmt.Errorf("result: %w", err)
		}
	}
	r.State, r.CreatedAt, r.UpdatedAt = prp.JournalState(state), fromNanos(created), fromNanos(updated)
	return r, nil
}

// maxAppendAttempts bounds AppendCommand's retries after a concurrent
// append took the seq or the id it was about to insert.
const maxAppendAttempts = 20

// AppendCommand implements controller.Store: in one transaction it looks
// the id up, then inserts at max(seq)+1. The primary key (session, seq) and
// the unique index (session, id) make a concurrent append of another
// replica fail instead of sharing a seq or journaling an id twice; the
// loser runs again and sees the winner's row.
func (s *PRPStore) AppendCommand(ctx context.Context, session string, c prp.Command, now time.Time) (controller.CommandRecord, bool, error) {
	if err := prpwire.ValidateCommand(c); err != nil {
		return controller.CommandRecord{}, false, fmt.Errorf("sqlstore: session %s: %w", session, err)
	}
	body, err := jsonText(c)
	if err != nil {
		return controller.CommandRecord{}, false, fmt.Errorf("sqlstore: command %s of session %s: %w", c.ID, session, err)
	}
	for attempt := 0; ; attempt++ {
		var out controller.CommandRecord
		var existed bool
		err := s.db.inTx(ctx, func(tx handle) error {
			r, err := scanCommand(tx.queryRow(ctx, "SELECT "+commandColumns+" FROM prp_commands WHERE session = ? AND id = ?", session, c.ID))
			switch {
			case err == nil:
				if r.Command.Digest != c.Digest {
					return fmt.Errorf("sqlstore: command %q of session %s was journaled with another body: %w", c.ID, session, controller.ErrIdempotencyConflict)
				}
				out, existed = r, true
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			var last uint64
			if err := tx.queryRow(ctx, "SELECT COALESCE(MAX(seq), 0) FROM prp_commands WHERE session = ?", session).Scan(&last); err != nil {
				return err
			}
			out = controller.CommandRecord{Session: session, Seq: last + 1, Command: c, State: prp.JournalReceived, CreatedAt: now, UpdatedAt: now}
			_, err = tx.exec(ctx, `INSERT INTO prp_commands (session, seq, id, digest, command, state, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, session, out.Seq, c.ID, c.Digest, body, string(prp.JournalReceived), nanos(now), nanos(now))
			return err
		})
		if _, dup := uniqueViolation(err); dup && attempt < maxAppendAttempts && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, controller.ErrIdempotencyConflict) {
			return controller.CommandRecord{}, false, err
		}
		if err != nil {
			return controller.CommandRecord{}, false, fmt.Errorf("sqlstore: append command %s to session %s: %w", c.ID, session, err)
		}
		return out, existed, nil
	}
}

// GetCommand implements controller.Store.
func (s *PRPStore) GetCommand(ctx context.Context, session, id string) (controller.CommandRecord, error) {
	r, err := scanCommand(s.db.reads().queryRow(ctx, "SELECT "+commandColumns+" FROM prp_commands WHERE session = ? AND id = ?", session, id))
	if errors.Is(err, sql.ErrNoRows) {
		return controller.CommandRecord{}, fmt.Errorf("sqlstore: command %q of session %s: %w", id, session, errcode.ErrNotFound)
	}
	if err != nil {
		return controller.CommandRecord{}, fmt.Errorf("sqlstore: get command %q of session %s: %w", id, session, err)
	}
	return r, nil
}

// CommandsAfter implements controller.Store.
func (s *PRPStore) CommandsAfter(ctx context.Context, session string, after uint64, limit int) ([]controller.CommandRecord, error) {
	q := "SELECT " + commandColumns + " FROM prp_commands WHERE session = ? AND seq > ? ORDER BY seq"
	args := []any{session, after}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	rows, err := s.db.reads().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: commands of session %s: %w", session, err)
	}
	return collect(rows, "commands of session "+session, scanCommand)
}

// SessionsWithCommandsAfter implements controller.Store in one query
// whatever the number of cursors: they go as one JSON parameter (a
// statement of fixed text, prepared once), and each is one probe of the
// journal's primary key (session, seq), past its Sent.
func (s *PRPStore) SessionsWithCommandsAfter(ctx context.Context, cursors []controller.CommandCursor) ([]string, error) {
	if len(cursors) == 0 {
		return []string{}, ctx.Err()
	}
	type cursor struct {
		S string `json:"s"`
		N uint64 `json:"n"`
	}
	cs := make([]cursor, len(cursors))
	for i, c := range cursors {
		cs[i] = cursor{c.Session, c.Sent}
	}
	arg, err := json.Marshal(cs)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: sessions with commands to send: %w", err)
	}
	rows, err := s.db.reads().query(ctx, s.db.pendingCommandsSQL(), string(arg))
	if err != nil {
		return nil, fmt.Errorf("sqlstore: sessions with commands to send: %w", err)
	}
	return collect(rows, "sessions with commands to send", func(sc scanner) (string, error) {
		var id string
		err := sc.Scan(&id)
		return id, err
	})
}

// pendingCommandsSQL is SessionsWithCommandsAfter's query: its one
// parameter is a JSON array of {"s": session, "n": sent}, read by
// SQLite's json_each, PostgreSQL's jsonb_to_recordset.
func (db *DB) pendingCommandsSQL() string {
	from := `(SELECT json_extract(value, '$.s') AS s, json_extract(value, '$.n') AS n FROM json_each(?)) p`
	if db.d == postgres {
		from = `jsonb_to_recordset(CAST(? AS jsonb)) AS p(s text, n bigint)`
	}
	return `SELECT p.s FROM ` + from + ` WHERE EXISTS (SELECT 1 FROM prp_commands c WHERE c.session = p.s AND c.seq > p.n)`
}

// CompleteCommand implements controller.Store with one conditional UPDATE
// (only a command not yet done), then reads the record: the first result
// wins on every replica.
func (s *PRPStore) CompleteCommand(ctx context.Context, session string, res prp.Result, now time.Time) (controller.CommandRecord, error) {
	if err := completeCommand(ctx, s.db.writes(), session, res, now); err != nil {
		return controller.CommandRecord{}, err
	}
	r, err := scanCommand(s.db.writes().queryRow(ctx, "SELECT "+commandColumns+" FROM prp_commands WHERE session = ? AND id = ?", session, res.CommandID))
	if errors.Is(err, sql.ErrNoRows) {
		return controller.CommandRecord{}, fmt.Errorf("sqlstore: complete command %q of session %s: %w", res.CommandID, session, errcode.ErrNotFound)
	}
	if err != nil {
		return controller.CommandRecord{}, fmt.Errorf("sqlstore: complete command %s of session %s: %w", res.CommandID, session, err)
	}
	return r, nil
}

// completeCommand sets the result of command res.CommandID of session
// on h, unless it is done already (the first result wins); a command not
// journaled changes nothing.
func completeCommand(ctx context.Context, h handle, session string, res prp.Result, now time.Time) error {
	res.Duplicate = false
	body, err := jsonText(res)
	if err != nil {
		return fmt.Errorf("sqlstore: complete command %s of session %s: %w", res.CommandID, session, err)
	}
	state := prp.JournalDone
	if res.Status == prp.ResultIndeterminate {
		state = prp.JournalIndeterminate
	}
	if _, err := h.exec(ctx, `UPDATE prp_commands SET state = ?, result = ?, updated_at = ?
		WHERE session = ? AND id = ? AND state NOT IN (?, ?)`, string(state), body, nanos(now), session, res.CommandID,
		string(prp.JournalDone), string(prp.JournalIndeterminate)); err != nil {
		return fmt.Errorf("sqlstore: complete command %s of session %s: %w", res.CommandID, session, err)
	}
	return nil
}

// ClaimSecrets implements controller.Store with one conditional UPDATE
// (secrets_sent_at still NULL): of any number of replicas and connections
// exactly one claim succeeds.
func (s *PRPStore) ClaimSecrets(ctx context.Context, session, id string, now time.Time) (bool, error) {
	res, err := s.db.writes().exec(ctx, `UPDATE prp_commands SET secrets_sent_at = ?
		WHERE session = ? AND id = ? AND secrets_sent_at IS NULL`, nanos(now), session, id)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return false, fmt.Errorf("sqlstore: claim the secrets of command %s of session %s: %w", id, session, err)
	}
	if n == 1 {
		return true, nil
	}
	if _, err := s.GetCommand(ctx, session, id); err != nil {
		return false, err
	}
	return false, nil
}

// PutEvent implements controller.Store with INSERT ... ON CONFLICT DO
// NOTHING on (session, seq).
func (s *PRPStore) PutEvent(ctx context.Context, r controller.EventRecord) (bool, error) {
	if r.Seq == 0 || r.Session == "" {
		return false, fmt.Errorf("sqlstore: event of session %q: fields session and seq are required", r.Session)
	}
	ev, err := jsonText(r.Event)
	if err != nil {
		return false, fmt.Errorf("sqlstore: event %d of session %s: %w", r.Seq, r.Session, err)
	}
	ref, err := jsonText(r.Ref)
	if err != nil {
		return false, fmt.Errorf("sqlstore: event %d of session %s: %w", r.Seq, r.Session, err)
	}
	res, err := s.db.writes().exec(ctx, `INSERT INTO prp_events (session, seq, event, ref, stored_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (session, seq) DO NOTHING`, r.Session, r.Seq, ev, ref, nanos(r.StoredAt))
	if err != nil {
		return false, fmt.Errorf("sqlstore: put event %d of session %s: %w", r.Seq, r.Session, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlstore: put event %d of session %s: %w", r.Seq, r.Session, err)
	}
	return n == 1, nil
}

// PutEvents implements controller.EventBatcher: the events in one
// transaction (one commit, one sync of the log), each idempotent on
// (session, seq).
func (s *PRPStore) PutEvents(ctx context.Context, rs []controller.EventRecord) error {
	type row struct{ ev, ref sql.NullString }
	rows := make([]row, len(rs))
	for i, r := range rs {
		if r.Seq == 0 || r.Session == "" {
			return fmt.Errorf("sqlstore: event of session %q: fields session and seq are required", r.Session)
		}
		ev, err := jsonText(r.Event)
		if err != nil {
			return fmt.Errorf("sqlstore: event %d of session %s: %w", r.Seq, r.Session, err)
		}
		ref, err := jsonText(r.Ref)
		if err != nil {
			return fmt.Errorf("sqlstore: event %d of session %s: %w", r.Seq, r.Session, err)
		}
		rows[i] = row{ev, ref}
	}
	err := s.db.inTx(ctx, func(tx handle) error {
		for i, r := range rs {
			if _, err := tx.exec(ctx, `INSERT INTO prp_events (session, seq, event, ref, stored_at) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (session, seq) DO NOTHING`, r.Session, r.Seq, rows[i].ev, rows[i].ref, nanos(r.StoredAt)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && len(rs) > 0 {
		return fmt.Errorf("sqlstore: put events %d..%d of session %s: %w", rs[0].Seq, rs[len(rs)-1].Seq, rs[0].Session, err)
	}
	return err
}

var _ controller.EventBatcher = (*PRPStore)(nil)

// PutIntake implements controller.GroupIntaker: every batch's events (as
// PutEvents), the commands of its result events completed (as
// CompleteCommand) and its usage (as PutOutputUsage) in one transaction,
// one commit for the batches of many sessions (issue 55).
func (s *PRPStore) PutIntake(ctx context.Context, bs []controller.IntakeBatch) error {
	type row struct{ ev, ref sql.NullString }
	rows := make([][]row, len(bs))
	for i, b := range bs {
		rows[i] = make([]row, len(b.Events))
		for j, r := range b.Events {
			if r.Seq == 0 || r.Session == "" || r.Session != b.Session {
				return fmt.Errorf("sqlstore: event of session %q in a batch of session %q: fields session and seq are required", r.Session, b.Session)
			}
			ev, err := jsonText(r.Event)
			if err != nil {
				return fmt.Errorf("sqlstore: event %d of session %s: %w", r.Seq, r.Session, err)
			}
			ref, err := jsonText(r.Ref)
			if err != nil {
				return fmt.Errorf("sqlstore: event %d of session %s: %w", r.Seq, r.Session, err)
			}
			rows[i][j] = row{ev, ref}
		}
	}
	err := s.db.inTx(ctx, func(tx handle) error {
		for i, b := range bs {
			for j, r := range b.Events {
				if _, err := tx.exec(ctx, `INSERT INTO prp_events (session, seq, event, ref, stored_at) VALUES (?, ?, ?, ?, ?)
					ON CONFLICT (session, seq) DO NOTHING`, r.Session, r.Seq, rows[i][j].ev, rows[i][j].ref, nanos(r.StoredAt)); err != nil {
					return err
				}
			}
			for _, r := range b.Events {
				if r.Event.Kind == prp.EventResult && r.Event.Result != nil {
					if err := completeCommand(ctx, tx, r.Session, *r.Event.Result, r.StoredAt); err != nil {
						return err
					}
				}
			}
			for _, u := range b.Usage {
				if _, err := tx.exec(ctx, `INSERT INTO prp_output_usage (session, task, seq, bytes, events, truncated, discarded) VALUES (?, ?, ?, ?, ?, ?, ?)
					ON CONFLICT (session, task) DO UPDATE SET seq = excluded.seq, bytes = excluded.bytes, events = excluded.events,
						truncated = excluded.truncated, discarded = excluded.discarded
					WHERE prp_output_usage.seq < excluded.seq`,
					b.Session, u.Task, u.Usage.Seq, u.Usage.Bytes, u.Usage.Events, u.Usage.Truncated, u.Usage.Discarded); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlstore: intake of %d sessions: %w", len(bs), err)
	}
	return nil
}

var _ controller.GroupIntaker = (*PRPStore)(nil)

// EventsAfter implements controller.Store.
func (s *PRPStore) EventsAfter(ctx context.Context, session string, after uint64, limit int) ([]controller.EventRecord, error) {
	q := "SELECT session, seq, event, ref, stored_at FROM prp_events WHERE session = ? AND seq > ? ORDER BY seq"
	args := []any{session, after}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	rows, err := s.db.reads().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: events of session %s: %w", session, err)
	}
	return collect(rows, "events of session "+session, func(sc scanner) (controller.EventRecord, error) {
		var r controller.EventRecord
		var ev, ref sql.NullString
		var stored sql.NullInt64
		if err := sc.Scan(&r.Session, &r.Seq, &ev, &ref, &stored); err != nil {
			return r, err
		}
		if err := fromJSONText(ev, &r.Event); err != nil {
			return r, fmt.Errorf("event %d: %w", r.Seq, err)
		}
		if ref.Valid {
			r.Ref = &controller.OutputRef{}
			if err := fromJSONText(ref, r.Ref); err != nil {
				return r, fmt.Errorf("event %d: %w", r.Seq, err)
			}
		}
		r.StoredAt = fromNanos(stored)
		return r, nil
	})
}

// LastEventSeq implements controller.Store: the highest of the stored
// events' seqs and the session's output accounting's (which acks the
// events the controller discarded).
func (s *PRPStore) LastEventSeq(ctx context.Context, session string) (uint64, error) {
	var last, acked uint64
	if err := s.db.reads().queryRow(ctx, `SELECT COALESCE((SELECT MAX(seq) FROM prp_events WHERE session = ?), 0),
		COALESCE((SELECT seq FROM prp_output_usage WHERE session = ? AND task = ''), 0)`, session, session).Scan(&last, &acked); err != nil {
		return 0, fmt.Errorf("sqlstore: last event of session %s: %w", session, err)
	}
	return max(last, acked), nil
}

// OutputUsage implements controller.Store.
func (s *PRPStore) OutputUsage(ctx context.Context, session, task string) (controller.OutputUsage, error) {
	var u controller.OutputUsage
	err := s.db.reads().queryRow(ctx, `SELECT seq, bytes, events, truncated, discarded FROM prp_output_usage WHERE session = ? AND task = ?`,
		session, task).Scan(&u.Seq, &u.Bytes, &u.Events, &u.Truncated, &u.Discarded)
	if errors.Is(err, sql.ErrNoRows) {
		return controller.OutputUsage{}, nil
	}
	if err != nil {
		return controller.OutputUsage{}, fmt.Errorf("sqlstore: output usage of session %s: %w", session, err)
	}
	return u, nil
}

// PutOutputUsage implements controller.Store: one transaction of upserts
// that move a row only forwards (a higher seq).
func (s *PRPStore) PutOutputUsage(ctx context.Context, session string, us []controller.TaskUsage) error {
	err := s.db.inTx(ctx, func(tx handle) error {
		for _, u := range us {
			if _, err := tx.exec(ctx, `INSERT INTO prp_output_usage (session, task, seq, bytes, events, truncated, discarded) VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (session, task) DO UPDATE SET seq = excluded.seq, bytes = excluded.bytes, events = excluded.events,
					truncated = excluded.truncated, discarded = excluded.discarded
				WHERE prp_output_usage.seq < excluded.seq`,
				session, u.Task, u.Usage.Seq, u.Usage.Bytes, u.Usage.Events, u.Usage.Truncated, u.Usage.Discarded); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlstore: output usage of session %s: %w", session, err)
	}
	return nil
}
