package templates

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/berthdev/berth/errcode"
)

// memoryStore is the memory store (templatehook.NewMemoryStore).
type memoryStore struct {
	mu        sync.Mutex
	templates map[string]*Template
	events    map[string][]*Event // environment -> events by Seq
	sessions  map[string]*Session
	sevents   map[string][]*SessionEvent // session -> events by Seq
	tokens    map[string]*memToken
}

type memToken struct {
	t    terminalToken
	used bool
}

// newMemoryStore returns an empty in-memory store: the embedded default. It
// is safe for concurrent use; each operation is atomic under one lock.
func newMemoryStore() *memoryStore {
	return &memoryStore{templates: map[string]*Template{}, events: map[string][]*Event{},
		sessions: map[string]*Session{}, sevents: map[string][]*SessionEvent{}, tokens: map[string]*memToken{}}
}

// InsertTemplate implements templatehook.Records.
func (m *memoryStore) InsertTemplate(ctx context.Context, t *Template) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t == nil || t.ID == "" {
		return fmt.Errorf("custom: insert template: missing id: %w", errcode.ErrInvalid)
	}
	if t.Version != 1 {
		return fmt.Errorf("custom: insert template %s: version %d, want 1: %w", t.ID, t.Version, errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.templates[t.ID]; ok {
		return fmt.Errorf("custom: template %s: id already exists: %w", t.ID, errcode.ErrConflict)
	}
	m.templates[t.ID] = t.clone()
	return nil
}

// GetTemplate implements templatehook.Records.
func (m *memoryStore) GetTemplate(ctx context.Context, id string) (*Template, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.templates[id]
	if !ok {
		return nil, fmt.Errorf("custom: template %q: %w", id, errcode.ErrNotFound)
	}
	return t.clone(), nil
}

// ListTemplates implements templatehook.Records.
func (m *memoryStore) ListTemplates(ctx context.Context, f filter) ([]*Template, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	out := []*Template{}
	for _, t := range m.templates {
		if f.Environment != "" && t.Environment != f.Environment || f.DeleteWanted && !t.DeleteWanted {
			continue
		}
		out = append(out, t.clone())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Template) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// UpdateTemplate implements templatehook.Records.
func (m *memoryStore) UpdateTemplate(ctx context.Context, t *Template) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("custom: update template: nil template: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.templates[t.ID]
	if !ok {
		return fmt.Errorf("custom: template %q: %w", t.ID, errcode.ErrNotFound)
	}
	if cur.Version != t.Version-1 {
		return fmt.Errorf("custom: template %s: version %d does not follow stored version %d: %w", t.ID, t.Version, cur.Version, errcode.ErrConflict)
	}
	m.templates[t.ID] = t.clone()
	return nil
}

// AppendEvent implements templatehook.Records.
func (m *memoryStore) AppendEvent(ctx context.Context, e *Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e == nil || e.Environment == "" {
		return fmt.Errorf("custom: append event: missing environment: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.events[e.Environment]
	e.Seq = int64(len(list)) + 1
	c := *e
	m.events[e.Environment] = append(list, &c)
	return nil
}

// ListEvents implements templatehook.Records.
func (m *memoryStore) ListEvents(ctx context.Context, environment string) ([]*Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Event, 0, len(m.events[environment]))
	for _, e := range m.events[environment] {
		c := *e
		out = append(out, &c)
	}
	return out, nil
}

// InsertSession implements templatehook.Records: the one-active-session rule is checked
// under the store's lock.
func (m *memoryStore) InsertSession(ctx context.Context, s *Session) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s == nil || s.ID == "" || s.Environment == "" {
		return fmt.Errorf("custom: insert setup session: missing id or environment: %w", errcode.ErrInvalid)
	}
	if s.Version != 1 {
		return fmt.Errorf("custom: insert setup session %s: version %d, want 1: %w", s.ID, s.Version, errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[s.ID]; ok {
		return fmt.Errorf("custom: setup session %s: id already exists: %w", s.ID, errcode.ErrConflict)
	}
	if s.State.Active() {
		for _, o := range m.sessions {
			if o.Environment == s.Environment && o.State.Active() {
				return fmt.Errorf("custom: setup session %s of environment %s: %s is active: %w", s.ID, s.Environment, o.ID, ErrSessionActive)
			}
		}
	}
	m.sessions[s.ID] = s.clone()
	return nil
}

// GetSession implements templatehook.Records.
func (m *memoryStore) GetSession(ctx context.Context, id string) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("custom: setup session %q: %w", id, errcode.ErrNotFound)
	}
	return s.clone(), nil
}

// ListSessions implements templatehook.Records.
func (m *memoryStore) ListSessions(ctx context.Context, f filter) ([]*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	out := []*Session{}
	for _, s := range m.sessions {
		if f.Environment != "" && s.Environment != f.Environment || f.Active && !s.State.Active() {
			continue
		}
		out = append(out, s.clone())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Session) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// UpdateSession implements templatehook.Records.
func (m *memoryStore) UpdateSession(ctx context.Context, s *Session) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("custom: update setup session: nil session: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.sessions[s.ID]
	if !ok {
		return fmt.Errorf("custom: setup session %q: %w", s.ID, errcode.ErrNotFound)
	}
	if cur.Version != s.Version-1 {
		return fmt.Errorf("custom: setup session %s: version %d does not follow stored version %d: %w", s.ID, s.Version, cur.Version, errcode.ErrConflict)
	}
	if s.State.Active() && !cur.State.Active() {
		for _, o := range m.sessions {
			if o.ID != s.ID && o.Environment == s.Environment && o.State.Active() {
				return fmt.Errorf("custom: setup session %s of environment %s: %s is active: %w", s.ID, s.Environment, o.ID, ErrSessionActive)
			}
		}
	}
	m.sessions[s.ID] = s.clone()
	return nil
}

// AppendSessionEvent implements templatehook.Records.
func (m *memoryStore) AppendSessionEvent(ctx context.Context, e *SessionEvent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e == nil || e.Session == "" {
		return fmt.Errorf("custom: append session event: missing session: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.sevents[e.Session]
	e.Seq = int64(len(list)) + 1
	c := *e
	m.sevents[e.Session] = append(list, &c)
	return nil
}

// ListSessionEvents implements templatehook.Records.
func (m *memoryStore) ListSessionEvents(ctx context.Context, session string, after int64) ([]*SessionEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []*SessionEvent{}
	for _, e := range m.sevents[session] {
		if e.Seq > after {
			c := *e
			out = append(out, &c)
		}
	}
	return out, nil
}

// InsertTerminalToken implements templatehook.Records.
func (m *memoryStore) InsertTerminalToken(ctx context.Context, t *terminalToken) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t == nil || t.Hash == "" {
		return fmt.Errorf("custom: insert terminal token: missing hash: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tokens[t.Hash]; ok {
		return fmt.Errorf("custom: terminal token of session %s: hash already exists: %w", t.Session, errcode.ErrConflict)
	}
	m.tokens[t.Hash] = &memToken{t: *t}
	return nil
}

// PruneTerminalTokens implements templatehook.Records.
func (m *memoryStore) PruneTerminalTokens(ctx context.Context, before time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for h, rec := range m.tokens {
		if rec.t.ExpiresAt.Before(before) {
			delete(m.tokens, h)
			n++
		}
	}
	return n, nil
}

// RedeemTerminalToken implements templatehook.Records.
func (m *memoryStore) RedeemTerminalToken(ctx context.Context, hash string, now time.Time) (*terminalToken, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.tokens[hash]
	if !ok || rec.used || !rec.t.ExpiresAt.After(now) {
		return nil, fmt.Errorf("custom: redeem terminal token: %w", errTokenInvalid)
	}
	rec.used = true
	c := rec.t
	return &c, nil
}
