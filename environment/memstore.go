package environment

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/berthdev/berth/errcode"
)

// memoryStore is newMemoryStore's Store.
type memoryStore struct {
	mu      sync.RWMutex
	envs    map[string]*Environment
	names   map[string]string // name -> id
	drivers map[string]int    // driver -> number of environments
}

var _ Store = (*memoryStore)(nil)

// newMemoryStore returns an empty in-memory Store (envhook.NewMemoryStore,
// store.Memory): the embedded default for tests and demos. It is safe for
// concurrent use, stores and returns deep copies, and checks revisions,
// uniqueness and exclusive drivers under one lock, so each operation is
// atomic.
func newMemoryStore() Store {
	return &memoryStore{envs: map[string]*Environment{}, names: map[string]string{}, drivers: map[string]int{}}
}

// CreateEnvironment implements Store.
func (m *memoryStore) CreateEnvironment(ctx context.Context, env *Environment, exclusiveDriver bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if env == nil || env.ID == "" {
		return fmt.Errorf("environment: create: missing id: %w", errcode.ErrInvalid)
	}
	if env.Revision != 1 {
		return fmt.Errorf("environment %s: create: revision is %d, want 1: %w", env.ID, env.Revision, errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.envs[env.ID]; ok {
		return fmt.Errorf("environment %s: id already exists: %w", env.ID, errcode.ErrConflict)
	}
	if id, taken := m.names[env.Name]; taken {
		return fmt.Errorf("environment %q: name already used by %s: %w", env.Name, id, errcode.ErrConflict)
	}
	if exclusiveDriver && m.drivers[env.Driver] > 0 {
		return fmt.Errorf("environment %q: driver %q allows one environment per instance and one exists: %w", env.Name, env.Driver, errcode.ErrConflict)
	}
	m.envs[env.ID] = cloneEnvironment(env)
	m.names[env.Name] = env.ID
	m.drivers[env.Driver]++
	return nil
}

// GetEnvironment implements Store.
func (m *memoryStore) GetEnvironment(ctx context.Context, id string) (*Environment, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.envs[id]
	if !ok {
		return nil, fmt.Errorf("environment %q: %w", id, errcode.ErrNotFound)
	}
	return cloneEnvironment(e), nil
}

// ListEnvironments implements Store.
func (m *memoryStore) ListEnvironments(ctx context.Context, f ListFilter) ([]*Environment, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	out := make([]*Environment, 0, len(m.envs))
	for _, e := range m.envs {
		if f.Driver != "" && e.Driver != f.Driver {
			continue
		}
		if f.Status != "" && e.Status != f.Status {
			continue
		}
		out = append(out, cloneEnvironment(e))
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Environment) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// UpdateEnvironment implements Store.
func (m *memoryStore) UpdateEnvironment(ctx context.Context, env *Environment, baseRevision int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if env == nil {
		return fmt.Errorf("environment: update: nil environment: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.envs[env.ID]
	if !ok {
		return fmt.Errorf("environment %q: %w", env.ID, errcode.ErrNotFound)
	}
	if cur.Revision != baseRevision {
		return fmt.Errorf("environment %q (%s): stale revision %d, stored revision is %d: %w", cur.Name, cur.ID, baseRevision, cur.Revision, errcode.ErrConflict)
	}
	if env.Revision != baseRevision+1 {
		return fmt.Errorf("environment %q (%s): new revision %d does not follow base revision %d: %w", cur.Name, cur.ID, env.Revision, baseRevision, errcode.ErrConflict)
	}
	if id, taken := m.names[env.Name]; taken && id != env.ID {
		return fmt.Errorf("environment %q: name already used by %s: %w", env.Name, id, errcode.ErrConflict)
	}
	delete(m.names, cur.Name)
	m.drivers[cur.Driver]--
	m.envs[env.ID] = cloneEnvironment(env)
	m.names[env.Name] = env.ID
	m.drivers[env.Driver]++
	return nil
}

// DeleteEnvironment implements Store.
func (m *memoryStore) DeleteEnvironment(ctx context.Context, id string, baseRevision int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.envs[id]
	if !ok {
		return fmt.Errorf("environment %q: %w", id, errcode.ErrNotFound)
	}
	if cur.Revision != baseRevision {
		return fmt.Errorf("environment %q (%s): stale revision %d, stored revision is %d: %w", cur.Name, cur.ID, baseRevision, cur.Revision, errcode.ErrConflict)
	}
	delete(m.envs, id)
	delete(m.names, cur.Name)
	m.drivers[cur.Driver]--
	return nil
}

// cloneEnvironment returns a deep copy of e: config values of the normalized
// types (including nested JSON-decoded maps and lists) and the env and
// metadata maps are copied.
func cloneEnvironment(e *Environment) *Environment {
	if e == nil {
		return nil
	}
	c := *e
	c.Config = cloneConfig(e.Config)
	c.Env = maps.Clone(e.Env)
	c.Metadata = maps.Clone(e.Metadata)
	if e.ActiveTemplate != nil {
		t := *e.ActiveTemplate
		c.ActiveTemplate = &t
	}
	c.Pool = clonePool(e.Pool)
	return &c
}

func cloneConfig(cfg map[string]any) map[string]any {
	if cfg == nil {
		return nil
	}
	// A copy of the map as it is (no key hashed again), then a copy of
	// each value that is itself a slice or map: configs mostly hold
	// scalars.
	out := maps.Clone(cfg)
	for k, v := range cfg {
		switch v.(type) {
		case []string, map[string]string, []any, map[string]any:
			out[k] = cloneValue(v)
		}
	}
	return out
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case []string:
		return slices.Clone(t)
	case map[string]string:
		return maps.Clone(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	case map[string]any:
		return cloneConfig(t)
	}
	return v
}
