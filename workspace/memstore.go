package workspace

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/workspacehook"
)

// memoryStore is the memory store (workspacehook.NewMemoryStore).
type memoryStore struct {
	mu   sync.Mutex
	byID map[string]*Workspace
}

// newMemoryStore returns an empty in-memory store: the embedded default.
// It is safe for concurrent use; each operation is atomic under one lock.
func newMemoryStore() *memoryStore {
	return &memoryStore{byID: map[string]*Workspace{}}
}

// live returns the live record of an owner's key; the caller holds m.mu.
func (m *memoryStore) live(company, project, key string) *Workspace {
	for _, w := range m.byID {
		if w.Company == company && w.Project == project && w.Key == key && w.State != StateEnded {
			return w
		}
	}
	return nil
}

// InsertWorkspace implements workspacehook.Records.
func (m *memoryStore) InsertWorkspace(ctx context.Context, w *Workspace) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.validate(); err != nil {
		return err
	}
	if w.State != StatePreparing || w.Revision != 1 {
		return fmt.Errorf("workspace %s: inserted %s at revision %d, want preparing at 1 (write-ahead): %w", w.ID, w.State, w.Revision, errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[w.ID]; ok {
		return fmt.Errorf("workspace %s: id already exists: %w", w.ID, errcode.ErrConflict)
	}
	if o := m.live(w.Company, w.Project, w.Key); o != nil {
		return fmt.Errorf("workspace %s: key %q is live as workspace %s: %w", w.ID, w.Key, o.ID, errcode.ErrConflict)
	}
	m.byID[w.ID] = w.clone()
	return nil
}

// GetWorkspace implements workspacehook.Records.
func (m *memoryStore) GetWorkspace(ctx context.Context, id string) (*Workspace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.byID[id]
	if !ok {
		return nil, fmt.Errorf("workspace %q: %w", id, errcode.ErrNotFound)
	}
	return w.clone(), nil
}

// FindWorkspace implements workspacehook.Records.
func (m *memoryStore) FindWorkspace(ctx context.Context, company, project, key string) (*Workspace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.live(company, project, key); w != nil && company != "" {
		return w.clone(), nil
	}
	return nil, fmt.Errorf("workspace key %q of company %q, project %q: %w", key, company, project, errcode.ErrNotFound)
}

// ListWorkspaces implements workspacehook.Records.
func (m *memoryStore) ListWorkspaces(ctx context.Context, f workspacehook.Filter) ([]*Workspace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	out := []*Workspace{}
	for _, w := range m.byID {
		if f.Company != "" && (w.Company != f.Company || w.Project != f.Project) ||
			f.Lease != "" && w.Lease != f.Lease || f.State != "" && string(w.State) != f.State {
			continue
		}
		out = append(out, w.clone())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Workspace) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// UpdateWorkspace implements workspacehook.Records.
func (m *memoryStore) UpdateWorkspace(ctx context.Context, w *Workspace) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.byID[w.ID]
	if !ok {
		return fmt.Errorf("workspace %q: %w", w.ID, errcode.ErrNotFound)
	}
	if err := w.follows(cur); err != nil {
		return err
	}
	m.byID[w.ID] = w.clone()
	return nil
}
