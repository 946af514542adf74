package prp

import (
	"context"
	"time"
)

// TicketStore holds ticket records (PRP-2). Implementations: a memory
// store (store.Memory), SQLite and PostgreSQL (store/sqlite, store/postgres). Each passes
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
