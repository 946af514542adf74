package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// PRPStore is the runner protocol's part of the store: it implements
// prp.TicketStore and controller.Store on the DB it came from. Its methods
// live on their own type so that their names (CreateSession, PutEvent)
// never collide with other components'.
type PRPStore struct{ db *DB }

var (
	_ prp.TicketStore  = (*PRPStore)(nil)
	_ controller.Store = (*PRPStore)(nil)
)

// PRP returns the runner protocol store on db; it shares db's connections
// and is valid until db is closed.
func (db *DB) PRP() *PRPStore { return &PRPStore{db: db} }

// CreateTicket implements prp.TicketStore.
func (s *PRPStore) CreateTicket(ctx context.Context, r prp.TicketRecord) error {
	if err := prpwire.ValidateTicketRecord(r); err != nil {
		return err
	}
	_, err := s.db.writes().exec(ctx, `INSERT INTO prp_tickets (hash, lease, run, company, scope, created_at, expires_at, resume, holder)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.Hash.String(), r.Lease, r.Run, r.Company, string(r.Scope), nanos(r.CreatedAt), nanos(r.ExpiresAt),
		sql.NullString{String: r.Resume, Valid: r.Resume != ""}, r.Holder)
	if _, dup := uniqueViolation(err); dup {
		return fmt.Errorf("sqlstore: ticket for lease %s: %w", r.Lease, prp.ErrTicketExists)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: create ticket for lease %s: %w", r.Lease, err)
	}
	return nil
}

const ticketColumns = `hash, lease, run, company, scope, created_at, expires_at, used_at, session, resume, holder`

func scanTicket(sc scanner) (prp.TicketRecord, error) {
	var r prp.TicketRecord
	var hash, scope string
	var created, expires, used sql.NullInt64
	var session, resume sql.NullString
	if err := sc.Scan(&hash, &r.Lease, &r.Run, &r.Company, &scope, &created, &expires, &used, &session, &resume, &r.Holder); err != nil {
		return prp.TicketRecord{}, err
	}
	if b, err := hex.DecodeString(hash); err != nil || len(b) != len(r.Hash) {
		return prp.TicketRecord{}, fmt.Errorf("ticket hash %q is not hex of %d bytes", hash, len(r.Hash))
	} else {
		copy(r.Hash[:], b)
	}
	r.Scope, r.CreatedAt, r.ExpiresAt, r.UsedAt, r.Session = prp.Scope(scope), fromNanos(created), fromNanos(expires), fromNanos(used), session.String
	r.Resume = resume.String
	return r, nil
}

// ConsumeTicket implements prp.TicketStore with ONE conditional UPDATE
// (unused, this lease, not expired), so that of concurrent or replayed
// exchanges on any number of replicas exactly one succeeds; when no row
// changed, a second read explains why with prpwire.ClassifyTicket.
func (s *PRPStore) ConsumeTicket(ctx context.Context, hash prp.TicketHash, lease, session string, now time.Time) (prp.TicketRecord, error) {
	r, err := scanTicket(s.db.writes().queryRow(ctx, `UPDATE prp_tickets SET used_at = ?, session = COALESCE(resume, ?)
		WHERE hash = ? AND lease = ? AND used_at IS NULL AND expires_at > ?
		RETURNING `+ticketColumns, nanos(now), session, hash.String(), lease, nanos(now)))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return prp.TicketRecord{}, fmt.Errorf("sqlstore: consume ticket for lease %s: %w", lease, err)
	}
	r, err = scanTicket(s.db.writes().queryRow(ctx, "SELECT "+ticketColumns+" FROM prp_tickets WHERE hash = ?", hash.String()))
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return prp.TicketRecord{}, fmt.Errorf("sqlstore: consume ticket for lease %s: %w", lease, err)
	}
	if cerr := prpwire.ClassifyTicket(r, found, lease, now); cerr != nil {
		return prp.TicketRecord{}, cerr
	}
	// The row changed between the two statements (another replica used it
	// in between): a replay.
	return prp.TicketRecord{}, fmt.Errorf("%w: lease %s", prp.ErrTicketReplayed, lease)
}

// CreateSession implements controller.Store.
func (s *PRPStore) CreateSession(ctx context.Context, r controller.Session) error {
	if !prpwire.ValidID(r.ID) || !prpwire.ValidID(r.Lease) || !prpwire.ValidID(r.Run) || !prpwire.ValidID(r.Company) || !r.Scope.Valid() {
		return fmt.Errorf("sqlstore: session %q: fields id, lease, run, company and scope must be valid", r.ID)
	}
	_, err := s.db.writes().exec(ctx, `INSERT INTO prp_sessions (id, lease, run, company, scope, created_at, ticket, holder) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Lease, r.Run, r.Company, string(r.Scope), nanos(r.CreatedAt), sql.NullString{String: r.Ticket, Valid: r.Ticket != ""}, r.Holder)
	if _, dup := uniqueViolation(err); dup {
		return fmt.Errorf("sqlstore: session %s: %w", r.ID, errcode.ErrAlreadyExists)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: create session %s: %w", r.ID, err)
	}
	return nil
}

// GetSession implements controller.Store.
func (s *PRPStore) GetSession(ctx context.Context, id string) (controller.Session, error) {
	r, err := scanSession(s.db.reads().queryRow(ctx, `SELECT `+sessionColumns+` FROM prp_sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return controller.Session{}, fmt.Errorf("sqlstore: session %q: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return controller.Session{}, fmt.Errorf("sqlstore: get session %q: %w", id, err)
	}
	return r, nil
}

const sessionColumns = `id, lease, run, company, scope, created_at, ticket, holder, conn_until`

func scanSession(sc scanner) (controller.Session, error) {
	var r controller.Session
	var scope string
	var created, until sql.NullInt64
	var ticket sql.NullString
	if err := sc.Scan(&r.ID, &r.Lease, &r.Run, &r.Company, &scope, &created, &ticket, &r.Holder, &until); err != nil {
		return controller.Session{}, err
	}
	r.Scope, r.CreatedAt, r.Ticket, r.ConnectedUntil = prp.Scope(scope), fromNanos(created), ticket.String, fromNanos(until)
	return r, nil
}

// ClaimConnection implements controller.Store with one conditional UPDATE
// (no other connection's claim lasts past now), so that of two replicas
// only one accepts a session's connection.
func (s *PRPStore) ClaimConnection(ctx context.Context, session, conn string, until, now time.Time) (bool, error) {
	res, err := s.db.writes().exec(ctx, `UPDATE prp_sessions SET conn = ?, conn_until = ?
		WHERE id = ? AND (conn IS NULL OR conn = ? OR conn_until IS NULL OR conn_until <= ?)`, conn, nanos(until), session, conn, nanos(now))
	if err != nil {
		return false, fmt.Errorf("sqlstore: claim the connection of session %s: %w", session, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("sqlstore: claim the connection of session %s: %w", session, err)
	} else if n == 1 {
		return true, nil
	}
	if _, err := s.GetSession(ctx, session); err != nil {
		return false, err
	}
	return false, nil
}

// RenewConnections implements controller.Store with one conditional
// UPDATE of all the claims (ClaimConnection's condition per session),
// which names the claims it set (of two claims of one session, the
// database sets one): one statement and one commit however
// many connections it renews. The claims go as one JSON parameter
// ({"s": session, "c": connection}), each session found by the primary
// key.
func (s *PRPStore) RenewConnections(ctx context.Context, claims []controller.ConnectionClaim, until, now time.Time) ([]controller.ConnectionClaim, error) {
	if len(claims) == 0 {
		return []controller.ConnectionClaim{}, ctx.Err()
	}
	type claim struct {
		S string `json:"s"`
		C string `json:"c"`
	}
	cs := make([]claim, len(claims))
	for i, c := range claims {
		cs[i] = claim{c.Session, c.Conn}
	}
	arg, err := json.Marshal(cs)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: renew %d connection claims: %w", len(claims), err)
	}
	rows, err := s.db.writes().query(ctx, s.db.renewConnectionsSQL(), nanos(until), string(arg), nanos(now))
	if err != nil {
		return nil, fmt.Errorf("sqlstore: renew %d connection claims: %w", len(claims), err)
	}
	return collect(rows, "renew connection claims", func(sc scanner) (controller.ConnectionClaim, error) {
		var c controller.ConnectionClaim
		err := sc.Scan(&c.Session, &c.Conn)
		return c, err
	})
}

// renewConnectionsSQL is RenewConnections' statement: its parameters are
// until, the claims (a JSON array read by SQLite's json_each,
// PostgreSQL's jsonb_to_recordset) and now.
func (db *DB) renewConnectionsSQL() string {
	from := `(SELECT json_extract(value, '$.s') AS s, json_extract(value, '$.c') AS c FROM json_each(?)) AS p`
	if db.d == postgres {
		from = `jsonb_to_recordset(CAST(? AS jsonb)) AS p(s text, c text)`
	}
	return `UPDATE prp_sessions SET conn = p.c, conn_until = ? FROM ` + from + `
		WHERE prp_sessions.id = p.s AND (prp_sessions.conn IS NULL OR prp_sessions.conn = p.c OR prp_sessions.conn_until IS NULL OR prp_sessions.conn_until <= ?)
		RETURNING prp_sessions.id, prp_sessions.conn`
}

// ReleaseConnection implements controller.Store.
func (s *PRPStore) ReleaseConnection(ctx context.Context, session, conn string) error {
	if _, err := s.db.writes().exec(ctx, `UPDATE prp_sessions SET conn = NULL, conn_until = NULL WHERE id = ? AND conn = ?`, session, conn); err != nil {
		return fmt.Errorf("sqlstore: release the connection of session %s: %w", session, err)
	}
	return nil
}

// HandOverSession implements controller.Store with one conditional
// UPDATE (the session is still the instance's).
func (s *PRPStore) HandOverSession(ctx context.Context, session, company, run string) (bool, error) {
	if !prpwire.ValidID(company) || !prpwire.ValidID(run) || company == authz.InstanceCompany || strings.HasPrefix(run, prp.PoolRunPrefix) {
		return false, fmt.Errorf("sqlstore: hand over session %s: fields company and run must be valid ids of a tenant (a run not of a warm-pool member)", session)
	}
	res, err := s.db.writes().exec(ctx, `UPDATE prp_sessions SET company = ?, run = ? WHERE id = ? AND company = ?`, company, run, session, authz.InstanceCompany)
	if err != nil {
		return false, fmt.Errorf("sqlstore: hand over session %s: %w", session, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("sqlstore: hand over session %s: %w", session, err)
	} else if n == 1 {
		return true, nil
	}
	if _, err := s.GetSession(ctx, session); err != nil {
		return false, err
	}
	return false, nil
}

// LeaseSessions implements controller.Store through the index on
// prp_sessions (lease).
func (s *PRPStore) LeaseSessions(ctx context.Context, lease string) ([]controller.Session, error) {
	rows, err := s.db.reads().query(ctx, `SELECT `+sessionColumns+` FROM prp_sessions WHERE lease = ? ORDER BY created_at, id`, lease)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: sessions of lease %s: %w", lease, err)
	}
	return collect(rows, "sessions of lease "+lease, scanSession)
}
