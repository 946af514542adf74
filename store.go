package berth

import (
	"context"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/internal/sqlstore"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// Store persists the state of every berth package behind one value, so that
// a host opens one database and hands the same Store to each package. It
// serves environment.Store, environment.BindingStore, environment.HealthStore,
// environment.SecretUseStore, qualification.Store, lease.Store and
// handover.Store (project auth checks, AUTH-2) today; the custom image store joins this interface when
// that package lands (the SQL store gains its methods in
// internal/sqlstore, the memory store embeds its memory store). Both
// implementations pass each package's store conformance suite
// (internal/storetest, lease/leasetest, qualification/qualificationtest).
// A Store is safe for concurrent use.
type Store interface {
	environment.Store
	environment.BindingStore
	environment.HealthStore
	environment.SecretUseStore
	qualification.Store
	lease.Store
	handover.Store
	// Close releases the store's connections. The Store must not be used
	// afterwards. Close of a memory store does nothing.
	Close() error
}

// OpenStore opens the durable store at url and migrates its schema before
// returning:
//
//	sqlite:///abs/path.db     SQLite file (created if absent), WAL mode
//	sqlite://rel/path.db      SQLite file relative to the working directory
//	sqlite::memory:           private in-memory SQLite database
//	postgres://user@host/db   PostgreSQL (also postgresql://), via pgx
//
// Several processes may open the same database at once (replicas): schema
// migrations are serialized, and uniqueness and revision checks hold across
// processes. Errors never contain the URL's password. Close the Store when
// done.
func OpenStore(ctx context.Context, url string) (Store, error) {
	db, err := sqlstore.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	return db, nil
}

// NewMemoryStore returns an empty in-memory Store: the embedded default for
// tests and demos. Its contents live as long as the value; it never fails.
func NewMemoryStore() Store {
	return memoryStore{environment.NewMemoryStore(), environment.NewMemoryBindingStore(), environment.NewMemoryHealthStore(), environment.NewMemorySecretUseStore(),
		qualification.NewMemoryStore(), lease.NewMemoryStore(), &handover.MemoryStore{}}
}

// The packages' memory stores share the type name MemoryStore; aliases give
// the embedded fields distinct names.
type (
	envMemory      = environment.MemoryStore
	qualMemory     = qualification.MemoryStore
	leaseMemory    = lease.MemoryStore
	handoverMemory = handover.MemoryStore
)

// memoryStore composes the packages' memory stores into one Store.
type memoryStore struct {
	*envMemory
	*environment.MemoryBindingStore
	*environment.MemoryHealthStore
	*environment.MemorySecretUseStore
	*qualMemory
	*leaseMemory
	*handoverMemory
}

// Close implements Store; it does nothing.
func (memoryStore) Close() error { return nil }
