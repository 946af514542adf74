package prpwire

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/prp"
)

// NewMemoryTicketStore returns an empty prp.TicketStore in memory, safe for
// concurrent use; its tickets live as long as it, in this process only.
func NewMemoryTicketStore() prp.TicketStore { return &memoryTicketStore{} }

// memoryTicketStore is NewMemoryTicketStore's store.
type memoryTicketStore struct {
	mu sync.Mutex
	m  map[prp.TicketHash]prp.TicketRecord
}

// CreateTicket implements prp.TicketStore.
func (s *memoryTicketStore) CreateTicket(ctx context.Context, r prp.TicketRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateTicketRecord(r); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[prp.TicketHash]prp.TicketRecord{}
	}
	if _, ok := s.m[r.Hash]; ok {
		return fmt.Errorf("%w: lease %s", prp.ErrTicketExists, r.Lease)
	}
	r.UsedAt, r.Session = time.Time{}, ""
	s.m[r.Hash] = r
	return nil
}

// ConsumeTicket implements prp.TicketStore.
func (s *memoryTicketStore) ConsumeTicket(ctx context.Context, hash prp.TicketHash, lease, session string, now time.Time) (prp.TicketRecord, error) {
	if err := ctx.Err(); err != nil {
		return prp.TicketRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[hash]
	if err := ClassifyTicket(r, ok, lease, now); err != nil {
		return prp.TicketRecord{}, err
	}
	r.UsedAt, r.Session = now, cmp.Or(r.Resume, session)
	s.m[hash] = r
	return r, nil
}

// ClassifyTicket returns why a ticket cannot be exchanged for lease at now,
// or nil if it can: prp.ErrTicketUnknown (found false), prp.ErrTicketForeign,
// prp.ErrTicketReplayed, prp.ErrTicketExpired, in that order. Stores use it to
// explain a conditional update that matched no row.
func ClassifyTicket(r prp.TicketRecord, found bool, lease string, now time.Time) error {
	switch {
	case !found:
		return fmt.Errorf("%w: for lease %q", prp.ErrTicketUnknown, lease)
	case r.Lease != lease:
		return fmt.Errorf("%w: presented for lease %q", prp.ErrTicketForeign, lease)
	case !r.UsedAt.IsZero():
		return fmt.Errorf("%w: lease %s, used at %s", prp.ErrTicketReplayed, lease, r.UsedAt.UTC().Format(time.RFC3339))
	case !now.Before(r.ExpiresAt):
		return fmt.Errorf("%w: lease %s, expired at %s", prp.ErrTicketExpired, lease, r.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}
