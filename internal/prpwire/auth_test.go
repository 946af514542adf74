package prpwire_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prp/prptest"
	"github.com/berthdev/berth/internal/prpwire"
)

func TestMemoryTicketStore(t *testing.T) {
	prptest.RunTicketStoreTests(t, func(*testing.T) prp.TicketStore { return prpwire.NewMemoryTicketStore() })
}

func TestParseTicket(t *testing.T) {
	t.Parallel()
	tk, err := prp.NewTicket()
	if err != nil {
		t.Fatal(err)
	}
	got, err := prp.ParseTicket(tk.String() + "\n")
	if err != nil || got != tk {
		t.Fatalf("ParseTicket(String()+newline) = %v, %v", got, err)
	}
	s := tk.String()
	for _, bad := range []string{"", s[:len(s)-1], "x" + s[1:], s + "A", strings.Replace(s, s[10:11], "*", 1)} {
		_, err := prp.ParseTicket(bad)
		if !errors.Is(err, prp.ErrTicketMalformed) {
			t.Errorf("ParseTicket(%q) = %v, want ErrTicketMalformed", bad, err)
		}
		if bad != "" && strings.Contains(err.Error(), bad[6:]) {
			t.Errorf("the error quotes the ticket: %v", err)
		}
	}
}

func newSigner(t *testing.T, current string) *prp.Signer {
	t.Helper()
	s, err := prp.NewSigner(current, map[string][]byte{"k1": []byte(strings.Repeat("1", 32)), "k2": []byte(strings.Repeat("2", 32))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokens(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Second)
	c := prpwire.Claims{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, Session: "s_1", IssuedAt: now, ExpiresAt: now.Add(time.Minute)}
	s1 := newSigner(t, "k1")
	tok, err := prpwire.Mint(s1, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := prpwire.Verify(s1, tok, now)
	if err != nil || got != c {
		t.Fatalf("Verify = %+v, %v; want %+v", got, err, c)
	}
	// Key rotation: a signer whose current key is k2 still verifies k1 tokens.
	if _, err := prpwire.Verify(newSigner(t, "k2"), tok, now); err != nil {
		t.Errorf("Verify after rotation = %v", err)
	}
	if _, err := prpwire.Verify(s1, tok, c.ExpiresAt); !errors.Is(err, prpwire.ErrTokenExpired) {
		t.Errorf("Verify at expiry = %v, want ErrTokenExpired", err)
	}
	other, _ := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("x", 32))})
	if _, err := prpwire.Verify(other, tok, now); !errors.Is(err, prpwire.ErrTokenInvalid) {
		t.Errorf("Verify with another key = %v, want ErrTokenInvalid", err)
	}
	parts := strings.Split(tok, ".")
	forged := c
	forged.Lease = "lease-2"
	forgedTok, _ := prpwire.Mint(newSigner(t, "k1"), forged)
	spliced := parts[0] + "." + parts[1] + "." + strings.Split(forgedTok, ".")[2] + "." + parts[3]
	if _, err := prpwire.Verify(s1, spliced, now); !errors.Is(err, prpwire.ErrTokenInvalid) {
		t.Errorf("Verify of spliced claims = %v, want ErrTokenInvalid", err)
	}
	for _, bad := range []string{"", "prpk1.k1.x", tok + ".x", "prpk2" + tok[5:], strings.Repeat("a", prpwire.MaxTokenLen+1)} {
		if _, err := prpwire.Verify(s1, bad, now); !errors.Is(err, prpwire.ErrTokenMalformed) {
			t.Errorf("Verify(%.20q) = %v, want ErrTokenMalformed", bad, err)
		}
	}
	if _, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte("short")}); err == nil {
		t.Error("NewSigner accepted a short key")
	}
}

// PRP-7, PRP-8: a token authorizes commands for its own lease and run only,
// and a probe token none.
func TestClaimsAuthorize(t *testing.T) {
	t.Parallel()
	c := prpwire.Claims{Lease: "lease-1", Run: "run-1", Scope: prp.ScopeTask}
	if err := c.Authorize("lease-1", "run-1"); err != nil {
		t.Errorf("own lease and run: %v", err)
	}
	for _, lr := range [][2]string{{"lease-2", "run-1"}, {"lease-1", "run-2"}} {
		if err := c.Authorize(lr[0], lr[1]); !errors.Is(err, prp.ErrScopeDenied) || prpwire.CodeOf(err) != "scope_denied" {
			t.Errorf("Authorize(%s, %s) = %v, want ErrScopeDenied", lr[0], lr[1], err)
		}
	}
	c.Scope = prp.ScopeProbe
	if err := c.Authorize("lease-1", "run-1"); !errors.Is(err, prp.ErrScopeDenied) {
		t.Errorf("probe scope: %v, want ErrScopeDenied", err)
	}
}

// PRP-2: the exchange trades a ticket once for a token with the ticket's
// grant; expired, replayed and foreign tickets get distinct codes.
func TestExchange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now().UTC()
	store := prpwire.NewMemoryTicketStore()
	x := &prpwire.Exchanger{Store: store, Signer: newSigner(t, "k1")}
	mint := func(lease string, scope prp.Scope, ttl time.Duration) prp.Ticket {
		tk, err := prp.NewTicket()
		if err != nil {
			t.Fatal(err)
		}
		if err := store.CreateTicket(ctx, prp.TicketRecord{Hash: tk.Hash(), Lease: lease, Run: "run-1", Company: "co-1", Scope: scope, CreatedAt: now, ExpiresAt: now.Add(ttl)}); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	tk := mint("lease-1", prp.ScopeTask, time.Minute)
	resp, claims, err := x.Exchange(ctx, prpwire.ExchangeRequest{Ticket: tk.String(), Lease: "lease-1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := prpwire.Verify(x.Signer, resp.Token, now)
	if err != nil || got != claims || got.Lease != "lease-1" || got.Company != "co-1" || got.Session != resp.Session || resp.Scope != prp.ScopeTask {
		t.Errorf("token claims = %+v, %v; response %+v", got, err, resp)
	}
	if !resp.ExpiresAt.Equal(now.Add(prpwire.DefaultTokenTTL)) {
		t.Errorf("token expires %v, want %v", resp.ExpiresAt, now.Add(prpwire.DefaultTokenTTL))
	}
	_, _, err = x.Exchange(ctx, prpwire.ExchangeRequest{Ticket: tk.String(), Lease: "lease-1"}, now)
	if prpwire.CodeOf(err) != "ticket_replayed" {
		t.Errorf("replay: %v (code %q), want ticket_replayed", err, prpwire.CodeOf(err))
	}
	if strings.Contains(err.Error(), tk.String()[6:]) {
		t.Errorf("the error quotes the ticket: %v", err)
	}
	exp := mint("lease-1", prp.ScopeTask, time.Second)
	if _, _, err := x.Exchange(ctx, prpwire.ExchangeRequest{Ticket: exp.String(), Lease: "lease-1"}, now.Add(2*time.Second)); prpwire.CodeOf(err) != "ticket_expired" {
		t.Errorf("expired: %v, want ticket_expired", err)
	}
	foreign := mint("lease-2", prp.ScopeTask, time.Minute)
	if _, _, err := x.Exchange(ctx, prpwire.ExchangeRequest{Ticket: foreign.String(), Lease: "lease-1"}, now); prpwire.CodeOf(err) != "ticket_foreign" {
		t.Errorf("foreign: %v, want ticket_foreign", err)
	}
	unknown, _ := prp.NewTicket()
	if _, _, err := x.Exchange(ctx, prpwire.ExchangeRequest{Ticket: unknown.String(), Lease: "lease-1"}, now); prpwire.CodeOf(err) != "ticket_unknown" {
		t.Errorf("unknown: %v, want ticket_unknown", err)
	}
	// PRP-8: a probe identity is short-lived and never renewed.
	probe := mint("lease-1", prp.ScopeProbe, time.Minute)
	presp, pclaims, err := x.Exchange(ctx, prpwire.ExchangeRequest{Ticket: probe.String(), Lease: "lease-1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if presp.Scope != prp.ScopeProbe || presp.ExpiresAt.After(now.Add(prpwire.MaxProbeTokenTTL)) {
		t.Errorf("probe token: scope %s, expires %v; want probe within %v", presp.Scope, presp.ExpiresAt, prpwire.MaxProbeTokenTTL)
	}
	if _, _, err := x.Renew(pclaims, now, time.Time{}); !errors.Is(err, prp.ErrScopeDenied) {
		t.Errorf("Renew of a probe token = %v, want ErrScopeDenied", err)
	}
	tok2, c2, err := x.Renew(claims, now.Add(time.Minute), time.Time{})
	if err != nil || !c2.ExpiresAt.Equal(now.Add(time.Minute+prpwire.DefaultTokenTTL)) || c2.Session != claims.Session {
		t.Errorf("Renew = %+v, %v", c2, err)
	}
	if _, err := prpwire.Verify(x.Signer, tok2, now.Add(time.Minute)); err != nil {
		t.Errorf("renewed token: %v", err)
	}
}
