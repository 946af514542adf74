package prp

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"
)

// TicketStore holds ticket records (PRP-2). Implementations: MemoryTicketStore
// here; SQLite and PostgreSQL in the berth store. Each passes
// prptest.RunTicketStoreTests.
type TicketStore interface {
	// CreateTicket stores r (validated first); ErrTicketExists if a ticket
	// with r.Hash exists.
	CreateTicket(ctx context.Context, r TicketRecord) error
	// ConsumeTicket marks the ticket with hash as used at now by session
	// (by the record's Resume session instead, for a resume ticket),
	// in one conditional update that succeeds only if the ticket exists,
	// belongs to lease, is unused and has not expired at now, so that of
	// any number of concurrent or replayed exchanges (on any replica)
	// exactly one succeeds. It returns the updated record, or
	// ErrTicketUnknown, ErrTicketForeign (another lease; the ticket stays
	// unused), ErrTicketReplayed or ErrTicketExpired, checked in that
	// order.
	ConsumeTicket(ctx context.Context, hash TicketHash, lease, session string, now time.Time) (TicketRecord, error)
}

// MemoryTicketStore is a TicketStore in memory, safe for concurrent use.
// The zero value is ready.
type MemoryTicketStore struct {
	mu sync.Mutex
	m  map[TicketHash]TicketRecord
}

var _ TicketStore = (*MemoryTicketStore)(nil)

// CreateTicket implements TicketStore.
func (s *MemoryTicketStore) CreateTicket(ctx context.Context, r TicketRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[TicketHash]TicketRecord{}
	}
	if _, ok := s.m[r.Hash]; ok {
		return fmt.Errorf("%w: lease %s", ErrTicketExists, r.Lease)
	}
	r.UsedAt, r.Session = time.Time{}, ""
	s.m[r.Hash] = r
	return nil
}

// ConsumeTicket implements TicketStore.
func (s *MemoryTicketStore) ConsumeTicket(ctx context.Context, hash TicketHash, lease, session string, now time.Time) (TicketRecord, error) {
	if err := ctx.Err(); err != nil {
		return TicketRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[hash]
	if err := ClassifyTicket(r, ok, lease, now); err != nil {
		return TicketRecord{}, err
	}
	r.UsedAt, r.Session = now, cmp.Or(r.Resume, session)
	s.m[hash] = r
	return r, nil
}

// ClassifyTicket returns why a ticket cannot be exchanged for lease at now,
// or nil if it can: ErrTicketUnknown (found false), ErrTicketForeign,
// ErrTicketReplayed, ErrTicketExpired, in that order. Stores use it to
// explain a conditional update that matched no row.
func ClassifyTicket(r TicketRecord, found bool, lease string, now time.Time) error {
	switch {
	case !found:
		return fmt.Errorf("%w: for lease %q", ErrTicketUnknown, lease)
	case r.Lease != lease:
		return fmt.Errorf("%w: presented for lease %q", ErrTicketForeign, lease)
	case !r.UsedAt.IsZero():
		return fmt.Errorf("%w: lease %s, used at %s", ErrTicketReplayed, lease, r.UsedAt.UTC().Format(time.RFC3339))
	case !now.Before(r.ExpiresAt):
		return fmt.Errorf("%w: lease %s, expired at %s", ErrTicketExpired, lease, r.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}
