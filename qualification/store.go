package qualification

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/berthdev/berth/errcode"
)

// Store persists qualification records, one per (company, environment)
// (QUAL-2, QUAL-4). Implementations: NewMemoryStore here, and SQLite and
// PostgreSQL in store/sqlite and store/postgres; all pass qualificationtest.RunStoreTests.
// A Store is safe for concurrent use. Records are values: a Store never
// shares state with the caller.
type Store interface {
	// PutQualification stores rec, replacing the record of the same
	// company and environment. A record without company or environment is
	// refused with an error wrapping errcode.ErrInvalid, and nothing changes.
	PutQualification(ctx context.Context, rec Record) error
	// GetQualification returns the record of company for environment, or an
	// error wrapping errcode.ErrNotFound. Another company's record is never
	// returned (QUAL-4).
	GetQualification(ctx context.Context, company, environment string) (Record, error)
	// ListQualifications returns every company's record for environment,
	// sorted by company; an empty list (no error) when there is none.
	ListQualifications(ctx context.Context, environment string) ([]Record, error)
	// DeleteQualifications removes every company's record and last test
	// for environment (when the environment is deleted). Deleting none is
	// not an error.
	DeleteQualifications(ctx context.Context, environment string) error
	// PutLastTest stores t, replacing the last test of the same company
	// and environment; the qualification record is untouched. A test
	// without company or environment is refused with an error wrapping
	// errcode.ErrInvalid, and nothing changes.
	PutLastTest(ctx context.Context, t LastTest) error
	// GetLastTest returns the last test of company for environment, or an
	// error wrapping errcode.ErrNotFound. Another company's is never
	// returned.
	GetLastTest(ctx context.Context, company, environment string) (LastTest, error)
}

// checkRecord returns an error wrapping errcode.ErrInvalid when rec cannot be
// stored: it lacks a company or an environment.
func checkRecord(rec Record) error {
	if rec.Company == "" || rec.Environment == "" {
		return fmt.Errorf("%w: company %q, environment %q: both are required", errcode.ErrInvalid, rec.Company, rec.Environment)
	}
	return nil
}

// memoryStore is NewMemoryStore's Store.
type memoryStore struct {
	mu    sync.Mutex
	recs  map[memKey]Record
	tests map[memKey]LastTest
}

type memKey struct{ company, environment string }

// NewMemoryStore returns an empty in-memory Store, safe for concurrent use;
// its records are lost when the process ends.
func NewMemoryStore() Store {
	return &memoryStore{recs: map[memKey]Record{}, tests: map[memKey]LastTest{}}
}

// PutQualification implements Store.
func (m *memoryStore) PutQualification(ctx context.Context, rec Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkRecord(rec); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[memKey{rec.Company, rec.Environment}] = rec
	return nil
}

// GetQualification implements Store.
func (m *memoryStore) GetQualification(ctx context.Context, company, environment string) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.recs[memKey{company, environment}]
	if !ok {
		return Record{}, fmt.Errorf("%w: company %q, environment %q", errcode.ErrNotFound, company, environment)
	}
	return rec, nil
}

// ListQualifications implements Store.
func (m *memoryStore) ListQualifications(ctx context.Context, environment string) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []Record{}
	for k, rec := range m.recs {
		if k.environment == environment {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Company < out[j].Company })
	return out, nil
}

// DeleteQualifications implements Store.
func (m *memoryStore) DeleteQualifications(ctx context.Context, environment string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.recs {
		if k.environment == environment {
			delete(m.recs, k)
		}
	}
	for k := range m.tests {
		if k.environment == environment {
			delete(m.tests, k)
		}
	}
	return nil
}

// PutLastTest implements Store.
func (m *memoryStore) PutLastTest(ctx context.Context, t LastTest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.Company == "" || t.Environment == "" {
		return fmt.Errorf("%w: last test of company %q, environment %q: both are required", errcode.ErrInvalid, t.Company, t.Environment)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tests[memKey{t.Company, t.Environment}] = t
	return nil
}

// GetLastTest implements Store.
func (m *memoryStore) GetLastTest(ctx context.Context, company, environment string) (LastTest, error) {
	if err := ctx.Err(); err != nil {
		return LastTest{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tests[memKey{company, environment}]
	if !ok {
		return LastTest{}, fmt.Errorf("%w: last test of company %q, environment %q", errcode.ErrNotFound, company, environment)
	}
	return t, nil
}
