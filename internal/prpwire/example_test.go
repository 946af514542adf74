package prpwire_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// A controller mints a one-use ticket for a lease, keeps only its hash,
// and hands the ticket to the runner, which exchanges it once for a
// connection token (PRP-2). A replayed ticket is refused.
func ExampleExchanger() {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	// The controller's half: mint, store the hash with what it grants.
	ticket, err := prp.NewTicket()
	if err != nil {
		fmt.Println(err)
		return
	}
	// Only the hash is stored; the text travels to the runner, which
	// parses it back.
	parsed, err := prp.ParseTicket(ticket.String())
	fmt.Println(parsed.Hash() == ticket.Hash(), err)
	store := prpwire.NewMemoryTicketStore()
	err = store.CreateTicket(ctx, prp.TicketRecord{
		Hash: ticket.Hash(), Lease: "lease-1", Run: "run-1", Company: "acme",
		Scope: prp.ScopeTask, CreatedAt: now, ExpiresAt: now.Add(time.Minute),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	signer, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		fmt.Println(err)
		return
	}
	x := &prpwire.Exchanger{Store: store, Signer: signer}

	// The runner's half: present the ticket (its text) for the lease.
	req := prpwire.ExchangeRequest{Ticket: ticket.String(), Lease: "lease-1"}
	resp, claims, err := x.Exchange(ctx, req, now.Add(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Token != "", claims.Lease, claims.Run, claims.Company, claims.Scope)

	// The same ticket again: refused, whoever presents it.
	_, _, err = x.Exchange(ctx, req, now.Add(2*time.Second))
	fmt.Println(errors.Is(err, prp.ErrTicketReplayed), prpwire.CodeOf(err))
	// Output:
	// true <nil>
	// true lease-1 run-1 acme task
	// true ticket_replayed
}
