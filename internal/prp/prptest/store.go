// Package prptest holds the conformance suite every prp.TicketStore passes:
// the memory store here, the SQL stores in berth's store package.
package prptest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// RunTicketStoreTests runs the TicketStore conformance suite; newStore returns a
// fresh, empty store for each subtest. Times are truncated to microseconds,
// the precision SQL stores keep.
func RunTicketStoreTests(t *testing.T, newStore func(t *testing.T) prp.TicketStore) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	record := func(t *testing.T, lease string) (prp.Ticket, prp.TicketRecord) {
		t.Helper()
		tk, err := prp.NewTicket()
		if err != nil {
			t.Fatal(err)
		}
		return tk, prp.TicketRecord{Hash: tk.Hash(), Lease: lease, Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, CreatedAt: now, ExpiresAt: now.Add(prpwire.MaxTicketTTL)}
	}
	ctx := context.Background()

	t.Run("a ticket is exchanged once and returns its grant", func(t *testing.T) {
		s := newStore(t)
		tk, r := record(t, "lease-1")
		if err := s.CreateTicket(ctx, r); err != nil {
			t.Fatal(err)
		}
		got, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_1", now.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != r.Hash || got.Lease != "lease-1" || got.Run != "run-1" || got.Company != "co-1" || got.Scope != prp.ScopeTask || got.Session != "s_1" {
			t.Errorf("ConsumeTicket = %+v, want the created grant with session s_1", got)
		}
		if !got.UsedAt.Equal(now.Add(time.Second)) || !got.ExpiresAt.Equal(r.ExpiresAt) {
			t.Errorf("ConsumeTicket times: used %v expires %v, want %v and %v", got.UsedAt, got.ExpiresAt, now.Add(time.Second), r.ExpiresAt)
		}
		// PRP-2: a replayed ticket fails.
		if _, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_2", now.Add(2*time.Second)); !errors.Is(err, prp.ErrTicketReplayed) {
			t.Errorf("second ConsumeTicket = %v, want ErrTicketReplayed", err)
		}
	})
	t.Run("a resume ticket rejoins its session and keeps its holder mark", func(t *testing.T) {
		s := newStore(t)
		tk, r := record(t, "lease-1")
		r.Resume, r.Holder = "s_old", true
		if err := s.CreateTicket(ctx, r); err != nil {
			t.Fatal(err)
		}
		got, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_new", now.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got.Resume != "s_old" || got.Session != "s_old" || !got.Holder {
			t.Errorf("ConsumeTicket = %+v, want resume and session s_old, holder", got)
		}
		if _, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_new", now.Add(2*time.Second)); !errors.Is(err, prp.ErrTicketReplayed) {
			t.Errorf("second ConsumeTicket of a resume ticket = %v, want ErrTicketReplayed", err)
		}
		tk2, plain := record(t, "lease-1")
		if err := s.CreateTicket(ctx, plain); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ConsumeTicket(ctx, tk2.Hash(), "lease-1", "s_2", now.Add(time.Second)); err != nil || got.Resume != "" || got.Holder || got.Session != "s_2" {
			t.Errorf("ConsumeTicket of a plain ticket = %+v, %v; want session s_2, no resume, not holder", got, err)
		}
	})
	t.Run("an expired ticket is refused", func(t *testing.T) {
		s := newStore(t)
		tk, r := record(t, "lease-1")
		if err := s.CreateTicket(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_1", r.ExpiresAt); !errors.Is(err, prp.ErrTicketExpired) {
			t.Errorf("ConsumeTicket at expiry = %v, want ErrTicketExpired", err)
		}
	})
	t.Run("a foreign ticket is refused and stays usable for its lease", func(t *testing.T) {
		s := newStore(t)
		tk, r := record(t, "lease-1")
		if err := s.CreateTicket(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-2", "s_1", now); !errors.Is(err, prp.ErrTicketForeign) {
			t.Errorf("ConsumeTicket for another lease = %v, want ErrTicketForeign", err)
		}
		if _, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_1", now); err != nil {
			t.Errorf("ConsumeTicket for its lease after a foreign attempt = %v", err)
		}
	})
	t.Run("an unknown ticket is refused", func(t *testing.T) {
		s := newStore(t)
		tk, _ := record(t, "lease-1")
		if _, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_1", now); !errors.Is(err, prp.ErrTicketUnknown) {
			t.Errorf("ConsumeTicket of an unknown ticket = %v, want ErrTicketUnknown", err)
		}
	})
	t.Run("creating a ticket twice fails", func(t *testing.T) {
		s := newStore(t)
		_, r := record(t, "lease-1")
		if err := s.CreateTicket(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTicket(ctx, r); !errors.Is(err, prp.ErrTicketExists) {
			t.Errorf("second CreateTicket = %v, want ErrTicketExists", err)
		}
	})
	t.Run("an invalid record is refused", func(t *testing.T) {
		s := newStore(t)
		_, r := record(t, "lease-1")
		r.ExpiresAt = r.CreatedAt.Add(prpwire.MaxTicketTTL + time.Second)
		if err := s.CreateTicket(ctx, r); err == nil {
			t.Error("CreateTicket with a lifetime over MaxTicketTTL succeeded")
		}
	})
	t.Run("of concurrent exchanges exactly one succeeds", func(t *testing.T) {
		s := newStore(t)
		tk, r := record(t, "lease-1")
		if err := s.CreateTicket(ctx, r); err != nil {
			t.Fatal(err)
		}
		var ok, replayed atomic.Int32
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				_, err := s.ConsumeTicket(ctx, tk.Hash(), "lease-1", "s_"+string(rune('a'+i)), now)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, prp.ErrTicketReplayed):
					replayed.Add(1)
				default:
					t.Errorf("ConsumeTicket = %v", err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 || replayed.Load() != 15 {
			t.Errorf("16 concurrent exchanges: %d succeeded, %d replayed; want 1 and 15", ok.Load(), replayed.Load())
		}
	})
	t.Run("a cancelled context is honoured", func(t *testing.T) {
		s := newStore(t)
		tk, r := record(t, "lease-1")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.CreateTicket(cctx, r); !errors.Is(err, context.Canceled) {
			t.Errorf("CreateTicket with a cancelled context = %v, want context.Canceled", err)
		}
		if _, err := s.ConsumeTicket(cctx, tk.Hash(), "lease-1", "s_1", now); !errors.Is(err, context.Canceled) {
			t.Errorf("ConsumeTicket with a cancelled context = %v, want context.Canceled", err)
		}
	})
}
