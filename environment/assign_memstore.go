package environment

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/berthdev/berth/errcode"
)

// memoryBindingStore is newMemoryBindingStore's BindingStore.
type memoryBindingStore struct {
	mu       sync.RWMutex
	bindings map[BindingRef]*Binding
}

var _ BindingStore = (*memoryBindingStore)(nil)

// newMemoryBindingStore returns an empty in-memory BindingStore for tests,
// demos and single-process hosts. Every method runs under one lock, so each
// is atomic; it stores and returns copies. It is safe for concurrent use.
func newMemoryBindingStore() BindingStore {
	return &memoryBindingStore{bindings: map[BindingRef]*Binding{}}
}

// PutBinding implements BindingStore.
func (m *memoryBindingStore) PutBinding(ctx context.Context, b *Binding, baseRevision int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b == nil {
		return fmt.Errorf("environment: put binding: nil binding: %w", errcode.ErrInvalid)
	}
	if err := b.Validate(); err != nil {
		return err
	}
	if b.Revision != baseRevision+1 || baseRevision < 0 {
		return fmt.Errorf("environment: %s: revision %d does not follow base revision %d: %w", b, b.Revision, baseRevision, errcode.ErrConflict)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.bindings[b.BindingRef]
	switch {
	case baseRevision == 0 && ok:
		return fmt.Errorf("environment: %s already exists at revision %d: %w", b, cur.Revision, errcode.ErrConflict)
	case baseRevision > 0 && !ok:
		return fmt.Errorf("environment: %s: %w", b, errcode.ErrNotFound)
	case baseRevision > 0 && cur.Revision != baseRevision:
		return fmt.Errorf("environment: %s: stale revision %d, stored revision is %d: %w", b, baseRevision, cur.Revision, errcode.ErrConflict)
	}
	c := *b
	m.bindings[b.BindingRef] = &c
	return nil
}

// GetBinding implements BindingStore.
func (m *memoryBindingStore) GetBinding(ctx context.Context, ref BindingRef) (*Binding, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, ok := m.bindings[ref]
	if !ok {
		return nil, fmt.Errorf("environment: %s binding: %w", Binding{BindingRef: ref}, errcode.ErrNotFound)
	}
	c := *b
	return &c, nil
}

// DeleteBinding implements BindingStore.
func (m *memoryBindingStore) DeleteBinding(ctx context.Context, ref BindingRef, baseRevision int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.bindings[ref]
	if !ok {
		return fmt.Errorf("environment: %s: %w", Binding{BindingRef: ref}, errcode.ErrNotFound)
	}
	if cur.Revision != baseRevision {
		return fmt.Errorf("environment: %s: stale revision %d, stored revision is %d: %w", cur, baseRevision, cur.Revision, errcode.ErrConflict)
	}
	delete(m.bindings, ref)
	return nil
}

// ListBindings implements BindingStore.
func (m *memoryBindingStore) ListBindings(ctx context.Context, f BindingFilter) ([]*Binding, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	out := make([]*Binding, 0, len(m.bindings))
	for _, b := range m.bindings {
		if matchBinding(b, f) {
			c := *b
			out = append(out, &c)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Binding) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Company, b.Company))
	})
	return out, nil
}

// DeleteEnvironmentBindings implements BindingStore.
func (m *memoryBindingStore) DeleteEnvironmentBindings(ctx context.Context, envID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for ref, b := range m.bindings {
		if b.EnvironmentID == envID {
			delete(m.bindings, ref)
			n++
		}
	}
	return n, nil
}

func matchBinding(b *Binding, f BindingFilter) bool {
	return (f.Kind == "" || b.Kind == f.Kind) &&
		(f.Company == "" || b.Company == f.Company) &&
		(f.EnvironmentID == "" || b.EnvironmentID == f.EnvironmentID)
}
