package instance

import (
	"context"
	"fmt"
	"sync"

	"github.com/berthdev/berth/errcode"
)

// Store keeps the one settings record of an instance. Implementations:
// the memory store of NewMemoryStore, and the SQL stores of store/sqlite and store/postgres
// (store.Stores.Settings); instancetest.RunStoreTests is their conformance
// suite. A Store is safe for concurrent use.
type Store interface {
	// GetSettings returns the stored record, or an error wrapping
	// errcode.ErrNotFound when none was ever written.
	GetSettings(ctx context.Context) (Settings, error)
	// PutSettings stores s if the stored record is at revision
	// s.Revision-1 (no record at all for s.Revision 1), atomically across
	// processes sharing the store; otherwise it returns an error wrapping
	// errcode.ErrConflict and leaves the record unchanged. A revision below 1 is
	// errcode.ErrInvalid.
	PutSettings(ctx context.Context, s Settings) error
}

// memoryStore is NewMemoryStore's Store, in memory, for one process.
type memoryStore struct {
	mu  sync.Mutex
	rec *Settings
}

var _ Store = (*memoryStore)(nil)

// NewMemoryStore returns an empty Store in memory, for one process, safe
// for concurrent use.
func NewMemoryStore() Store { return &memoryStore{} }

// GetSettings implements Store.
func (m *memoryStore) GetSettings(ctx context.Context) (Settings, error) {
	if err := ctx.Err(); err != nil {
		return Settings{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rec == nil {
		return Settings{}, fmt.Errorf("instance: settings: %w", errcode.ErrNotFound)
	}
	return *m.rec, nil
}

// PutSettings implements Store.
func (m *memoryStore) PutSettings(ctx context.Context, s Settings) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Revision < 1 {
		return fmt.Errorf("instance: settings: field \"revision\": %d is not a stored revision (1, 2, ...): %w", s.Revision, errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var have int64
	if m.rec != nil {
		have = m.rec.Revision
	}
	if have != s.Revision-1 {
		return fmt.Errorf("instance: settings: writing revision %d over stored revision %d: %w", s.Revision, have, errcode.ErrConflict)
	}
	c := s
	m.rec = &c
	return nil
}
