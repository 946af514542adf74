package handover

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/berthdev/berth/errcode"
)

// NewMemoryStore returns an in-memory Store for tests and the embedded
// default, empty; it is safe for concurrent use and passes
// handovertest.RunStoreTests.
func NewMemoryStore() Store { return &memoryStore{} }

// memoryStore is the Store NewMemoryStore returns. Its zero value is ready.
type memoryStore struct {
	mu   sync.Mutex
	recs map[[2]string]AuthCheck
}

var _ Store = (*memoryStore)(nil)

func cloneCheck(c AuthCheck) AuthCheck {
	c.Projects = slices.Clone(c.Projects)
	if c.Projects == nil {
		c.Projects = []string{}
	}
	return c
}

// PutAuthCheck implements Store.
func (m *memoryStore) PutAuthCheck(ctx context.Context, c AuthCheck) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Company == "" || c.AccountRef == "" {
		return fmt.Errorf("handover: a project auth check needs a company and an account reference: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs == nil {
		m.recs = map[[2]string]AuthCheck{}
	}
	m.recs[[2]string{c.Company, c.AccountRef}] = cloneCheck(c)
	return nil
}

// CompleteAuthCheck implements Store.
func (m *memoryStore) CompleteAuthCheck(ctx context.Context, company, accountRef, prep string, status Status, checkedAt time.Time, checkedBy, message string) (AuthCheck, error) {
	if err := ctx.Err(); err != nil {
		return AuthCheck{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.recs[[2]string{company, accountRef}]
	switch {
	case !ok:
		return AuthCheck{}, fmt.Errorf("handover: project auth check of %s for company %q: %w", accountRef, company, errcode.ErrNotFound)
	case c.Preparation != prep:
		return AuthCheck{}, fmt.Errorf("handover: project auth check of %s for company %q: preparation %s: %w", accountRef, company, prep, ErrStale)
	}
	c.Status, c.CheckedAt, c.CheckedBy, c.Message = status, checkedAt, checkedBy, message
	m.recs[[2]string{company, accountRef}] = c
	return cloneCheck(c), nil
}

// GetAuthCheck implements Store.
func (m *memoryStore) GetAuthCheck(ctx context.Context, company, accountRef string) (AuthCheck, error) {
	if err := ctx.Err(); err != nil {
		return AuthCheck{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.recs[[2]string{company, accountRef}]
	if !ok {
		return AuthCheck{}, fmt.Errorf("handover: project auth check of %s for company %q: %w", accountRef, company, errcode.ErrNotFound)
	}
	return cloneCheck(c), nil
}

// ListAuthChecks implements Store.
func (m *memoryStore) ListAuthChecks(ctx context.Context, company string) ([]AuthCheck, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []AuthCheck{}
	for k, c := range m.recs {
		if company == "" || k[0] == company {
			out = append(out, cloneCheck(c))
		}
	}
	slices.SortFunc(out, func(a, b AuthCheck) int {
		return cmp.Or(cmp.Compare(a.Company, b.Company), cmp.Compare(a.AccountRef, b.AccountRef))
	})
	return out, nil
}

// DeleteAuthCheck implements Store.
func (m *memoryStore) DeleteAuthCheck(ctx context.Context, company, accountRef string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{company, accountRef}
	if _, ok := m.recs[k]; !ok {
		return fmt.Errorf("handover: project auth check of %s for company %q: %w", accountRef, company, errcode.ErrNotFound)
	}
	delete(m.recs, k)
	return nil
}
