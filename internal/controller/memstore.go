package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// NewMemoryStore returns an empty Store in memory, safe for concurrent use;
// its records live as long as it, in this process only. It passes
// controllertest.RunStoreTests, as the SQL stores do.
func NewMemoryStore() Store { return &memoryStore{} }

// memoryStore is NewMemoryStore's store; the zero value is ready.
type memoryStore struct {
	mu       sync.Mutex
	sessions map[string]Session
	commands map[string][]CommandRecord // by session, index seq-1
	events   map[string][]EventRecord   // by session, in seq order
	claimed  map[[2]string]bool         // secrets delivered, by (session, command id)
	usage    map[[2]string]OutputUsage  // by (session, task)
	conns    map[string]connClaim       // by session
}

// connClaim is a session's live connection and how long its claim lasts.
type connClaim struct {
	conn  string
	until time.Time
}

var _ Store = (*memoryStore)(nil)

func (s *memoryStore) init() {
	if s.sessions == nil {
		s.sessions = map[string]Session{}
		s.commands = map[string][]CommandRecord{}
		s.events = map[string][]EventRecord{}
		s.claimed = map[[2]string]bool{}
		s.usage = map[[2]string]OutputUsage{}
		s.conns = map[string]connClaim{}
	}
}

// CreateSession implements Store.
func (s *memoryStore) CreateSession(ctx context.Context, r Session) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validSession(r); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if _, ok := s.sessions[r.ID]; ok {
		return fmt.Errorf("controller: session %s: %w", r.ID, errcode.ErrAlreadyExists)
	}
	r.ConnectedUntil = time.Time{}
	s.sessions[r.ID] = r
	return nil
}

// GetSession implements Store.
func (s *memoryStore) GetSession(ctx context.Context, id string) (Session, error) {
	if err := ctx.Err(); err != nil {
		return Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[id]
	if !ok {
		return Session{}, fmt.Errorf("controller: session %q: %w", id, errcode.ErrNotFound)
	}
	r.ConnectedUntil = s.conns[id].until
	return r, nil
}

// ClaimConnection implements Store.
func (s *memoryStore) ClaimConnection(ctx context.Context, session, conn string, until, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if _, ok := s.sessions[session]; !ok {
		return false, fmt.Errorf("controller: session %q: %w", session, errcode.ErrNotFound)
	}
	if c, ok := s.conns[session]; ok && c.conn != conn && c.until.After(now) {
		return false, nil
	}
	s.conns[session] = connClaim{conn: conn, until: until}
	return true, nil
}

// RenewConnections implements Store.
func (s *memoryStore) RenewConnections(ctx context.Context, claims []ConnectionClaim, until, now time.Time) ([]ConnectionClaim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	out := []ConnectionClaim{}
	set := map[string]bool{}
	for _, cl := range claims {
		if _, ok := s.sessions[cl.Session]; !ok || set[cl.Session] {
			continue
		}
		if c, ok := s.conns[cl.Session]; ok && c.conn != cl.Conn && c.until.After(now) {
			continue
		}
		s.conns[cl.Session] = connClaim{conn: cl.Conn, until: until}
		set[cl.Session] = true
		out = append(out, cl)
	}
	return out, nil
}

// ReleaseConnection implements Store.
func (s *memoryStore) ReleaseConnection(ctx context.Context, session, conn string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.conns[session]; ok && c.conn == conn {
		delete(s.conns, session)
	}
	return nil
}

// HandOverSession implements Store.
func (s *memoryStore) HandOverSession(ctx context.Context, session, company, run string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !prpwire.ValidID(company) || !prpwire.ValidID(run) || company == authz.InstanceCompany || strings.HasPrefix(run, prp.PoolRunPrefix) {
		return false, fmt.Errorf("controller: hand over session %s: fields company and run must be valid ids of a tenant (a run not of a warm-pool member)", session)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sessions[session]
	switch {
	case !ok:
		return false, fmt.Errorf("controller: session %q: %w", session, errcode.ErrNotFound)
	case r.Company != authz.InstanceCompany:
		return false, nil
	}
	r.Company, r.Run = company, run
	s.sessions[session] = r
	return true, nil
}

// LeaseSessions implements Store.
func (s *memoryStore) LeaseSessions(ctx context.Context, lease string) ([]Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Session{}
	for _, r := range s.sessions {
		if r.Lease == lease {
			r.ConnectedUntil = s.conns[r.ID].until
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// AppendCommand implements Store.
func (s *memoryStore) AppendCommand(ctx context.Context, session string, c prp.Command, now time.Time) (CommandRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return CommandRecord{}, false, err
	}
	if err := prpwire.ValidateCommand(c); err != nil {
		return CommandRecord{}, false, fmt.Errorf("controller: session %s: %w", session, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	for _, r := range s.commands[session] {
		if r.Command.ID == c.ID {
			if r.Command.Digest != c.Digest {
				return CommandRecord{}, false, conflict(session, c.ID)
			}
			return copyCommand(r), true, nil
		}
	}
	r := CommandRecord{Session: session, Seq: uint64(len(s.commands[session]) + 1), Command: c, State: prp.JournalReceived, CreatedAt: now, UpdatedAt: now}
	s.commands[session] = append(s.commands[session], copyCommand(r))
	return r, false, nil
}

// GetCommand implements Store.
func (s *memoryStore) GetCommand(ctx context.Context, session, id string) (CommandRecord, error) {
	if err := ctx.Err(); err != nil {
		return CommandRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.commands[session] {
		if r.Command.ID == id {
			return copyCommand(r), nil
		}
	}
	return CommandRecord{}, fmt.Errorf("controller: command %q of session %s: %w", id, session, errcode.ErrNotFound)
}

// SessionsWithCommandsAfter implements Store: a session's journal holds
// seqs 1 to its length.
func (s *memoryStore) SessionsWithCommandsAfter(ctx context.Context, cursors []CommandCursor) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	for _, cur := range cursors {
		if uint64(len(s.commands[cur.Session])) > cur.Sent {
			out = append(out, cur.Session)
		}
	}
	return out, nil
}

// CommandsAfter implements Store.
func (s *memoryStore) CommandsAfter(ctx context.Context, session string, after uint64, limit int) ([]CommandRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []CommandRecord{}
	cmds := s.commands[session]
	for i := after; i < uint64(len(cmds)); i++ {
		if limit > 0 && len(out) == limit {
			break
		}
		out = append(out, copyCommand(cmds[i]))
	}
	return out, nil
}

// CompleteCommand implements Store.
func (s *memoryStore) CompleteCommand(ctx context.Context, session string, res prp.Result, now time.Time) (CommandRecord, error) {
	if err := ctx.Err(); err != nil {
		return CommandRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cmds := s.commands[session]
	for i := range cmds {
		if cmds[i].Command.ID != res.CommandID {
			continue
		}
		if !cmds[i].State.Terminal() {
			res.Duplicate = false
			cmds[i].State, cmds[i].Result, cmds[i].UpdatedAt = resultState(res), &res, now
		}
		return copyCommand(cmds[i]), nil
	}
	return CommandRecord{}, fmt.Errorf("controller: complete command %q of session %s: %w", res.CommandID, session, errcode.ErrNotFound)
}

// PutEvent implements Store.
func (s *memoryStore) PutEvent(ctx context.Context, r EventRecord) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if r.Seq == 0 || r.Session == "" {
		return false, fmt.Errorf("controller: event of session %q: fields session and seq are required", r.Session)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	evs := s.events[r.Session]
	i, found := slices.BinarySearchFunc(evs, r.Seq, func(e EventRecord, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	if found {
		return false, nil
	}
	s.events[r.Session] = slices.Insert(evs, i, copyEvent(r))
	return true, nil
}

// EventsAfter implements Store.
func (s *memoryStore) EventsAfter(ctx context.Context, session string, after uint64, limit int) ([]EventRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The events are kept in seq order: a read is a search and a copy of
	// at most limit records, not a scan and sort of the session's all
	// (which grew with the stream and held the lock the intake writes
	// under, issue 55).
	evs := s.events[session]
	i, found := slices.BinarySearchFunc(evs, after, func(e EventRecord, seq uint64) int { return cmp.Compare(e.Seq, seq) })
	if found {
		i++
	}
	evs = evs[i:]
	if limit > 0 && len(evs) > limit {
		evs = evs[:limit]
	}
	out := make([]EventRecord, len(evs))
	for j, r := range evs {
		out[j] = copyEvent(r)
	}
	return out, nil
}

// LastEventSeq implements Store.
func (s *memoryStore) LastEventSeq(ctx context.Context, session string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.usage[[2]string{session, ""}].Seq
	if evs := s.events[session]; len(evs) > 0 {
		last = max(last, evs[len(evs)-1].Seq)
	}
	return last, nil
}

// OutputUsage implements Store.
func (s *memoryStore) OutputUsage(ctx context.Context, session, task string) (OutputUsage, error) {
	if err := ctx.Err(); err != nil {
		return OutputUsage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage[[2]string{session, task}], nil
}

// PutOutputUsage implements Store.
func (s *memoryStore) PutOutputUsage(ctx context.Context, session string, us []TaskUsage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	for _, u := range us {
		k := [2]string{session, u.Task}
		if old, ok := s.usage[k]; !ok || old.Seq < u.Usage.Seq {
			s.usage[k] = u.Usage
		}
	}
	return nil
}

// ClaimSecrets implements Store.
func (s *memoryStore) ClaimSecrets(ctx context.Context, session, id string, _ time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	for _, r := range s.commands[session] {
		if r.Command.ID == id {
			k := [2]string{session, id}
			if s.claimed[k] {
				return false, nil
			}
			s.claimed[k] = true
			return true, nil
		}
	}
	return false, fmt.Errorf("controller: command %q of session %s: %w", id, session, errcode.ErrNotFound)
}

// validSession checks a session record's fields.
func validSession(r Session) error {
	if !prpwire.ValidID(r.ID) || !prpwire.ValidID(r.Lease) || !prpwire.ValidID(r.Run) || !prpwire.ValidID(r.Company) || !r.Scope.Valid() {
		return fmt.Errorf("controller: session %q: fields id, lease, run, company and scope must be valid", r.ID)
	}
	return nil
}

// conflict is the ErrIdempotencyConflict of command id in session.
func conflict(session, id string) error {
	return fmt.Errorf("controller: command %q of session %s was journaled with another body: %w", id, session, ErrIdempotencyConflict)
}

// resultState is the journal state a result puts its command in.
func resultState(res prp.Result) prp.JournalState {
	if res.Status == prp.ResultIndeterminate {
		return prp.JournalIndeterminate
	}
	return prp.JournalDone
}

// copyCommand returns r with its result copied, so that callers cannot
// change the store's record.
func copyCommand(r CommandRecord) CommandRecord {
	if r.Result != nil {
		res := *r.Result
		r.Result = &res
	}
	return r
}

func copyEvent(r EventRecord) EventRecord {
	if r.Ref != nil {
		ref := *r.Ref
		r.Ref = &ref
	}
	return r
}
