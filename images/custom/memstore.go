package custom

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
)

// memoryStore is NewMemoryStore's Store.
type memoryStore struct {
	mu        sync.Mutex
	templates map[string]*Template
	events    map[string][]*Event // environment -> events by Seq
}

// NewMemoryStore returns an empty in-memory Store: the embedded default. It
// is safe for concurrent use; each operation is atomic under one lock.
func NewMemoryStore() Store {
	return &memoryStore{templates: map[string]*Template{}, events: map[string][]*Event{}}
}

// InsertTemplate implements Store.
func (m *memoryStore) InsertTemplate(ctx context.Context, t *Template) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t == nil || t.ID == "" {
		return fmt.Errorf("custom: insert template: missing id: %w", ErrInvalid)
	}
	if t.Version != 1 {
		return fmt.Errorf("custom: insert template %s: version %d, want 1: %w", t.ID, t.Version, ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.templates[t.ID]; ok {
		return fmt.Errorf("custom: template %s: id already exists: %w", t.ID, ErrConflict)
	}
	m.templates[t.ID] = t.Clone()
	return nil
}

// GetTemplate implements Store.
func (m *memoryStore) GetTemplate(ctx context.Context, id string) (*Template, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.templates[id]
	if !ok {
		return nil, fmt.Errorf("custom: template %q: %w", id, ErrNotFound)
	}
	return t.Clone(), nil
}

// ListTemplates implements Store.
func (m *memoryStore) ListTemplates(ctx context.Context, f Filter) ([]*Template, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	out := []*Template{}
	for _, t := range m.templates {
		if f.Environment != "" && t.Environment != f.Environment || f.DeleteWanted && !t.DeleteWanted {
			continue
		}
		out = append(out, t.Clone())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Template) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// UpdateTemplate implements Store.
func (m *memoryStore) UpdateTemplate(ctx context.Context, t *Template) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("custom: update template: nil template: %w", ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.templates[t.ID]
	if !ok {
		return fmt.Errorf("custom: template %q: %w", t.ID, ErrNotFound)
	}
	if cur.Version != t.Version-1 {
		return fmt.Errorf("custom: template %s: version %d does not follow stored version %d: %w", t.ID, t.Version, cur.Version, ErrConflict)
	}
	m.templates[t.ID] = t.Clone()
	return nil
}

// AppendEvent implements Store.
func (m *memoryStore) AppendEvent(ctx context.Context, e *Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e == nil || e.Environment == "" {
		return fmt.Errorf("custom: append event: missing environment: %w", ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.events[e.Environment]
	e.Seq = int64(len(list)) + 1
	c := *e
	m.events[e.Environment] = append(list, &c)
	return nil
}

// ListEvents implements Store.
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
