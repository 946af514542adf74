package prpwire

import (
	"context"
	"fmt"
	"time"

	"github.com/berthdev/berth/internal/prp"
)

// ExchangePath is the HTTP path, relative to the controller's PRP base URL,
// where a runner POSTs an ExchangeRequest before the WebSocket upgrade.
const ExchangePath = "exchange"

// ConnectPath is the path, relative to the PRP base URL, of the WebSocket
// endpoint; the token travels as "Authorization: Bearer <token>".
const ConnectPath = "connect"

// MaxExchangeBody bounds an exchange request or response body.
const MaxExchangeBody = 8 << 10

// ExchangeRequest is the JSON body of the ticket exchange.
type ExchangeRequest struct {
	Ticket string `json:"ticket"`
	Lease  string `json:"lease"`
}

// ExchangeResponse is the JSON answer to a successful exchange (HTTP 200).
type ExchangeResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	Session   string    `json:"session"`
	Scope     prp.Scope `json:"scope"`
	// Lease and Run are the scope the token grants; the runner refuses
	// commands for anything else too (PRP-7).
	Lease string `json:"lease"`
	Run   string `json:"run"`
	// Resume is true when the ticket was a resume ticket: Session is the
	// existing session the runner rejoins with its state directory.
	Resume bool `json:"resume,omitempty"`
	// StateKey is the session's state key (StateKeyLen bytes, base64 in
	// JSON): the runner authenticates every record of its journal and
	// outbox with it and keeps it in memory only. A resume exchange
	// returns the same key again. Empty from a controller without one.
	StateKey []byte `json:"state_key,omitempty"`
}

// ErrorResponse is the JSON body of a refused exchange or upgrade (HTTP
// 401 for ticket and token errors): a stable code and a message that
// names no secret.
type ErrorResponse struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Exchanger turns tickets into connection tokens (PRP-2). It is the
// controller's half of the bootstrap, kept here so that every controller
// (and a test's) exchanges the same way.
type Exchanger struct {
	Store  prp.TicketStore
	Signer *prp.Signer
	// TokenTTL is the token lifetime for prp.ScopeTask (DefaultTokenTTL if
	// zero); probe tokens live at most MaxProbeTokenTTL.
	TokenTTL time.Duration
}

// Exchange consumes the ticket in req (one conditional store update) and
// mints a token for a new session. prp.Ticket errors are the store's
// (prp.ErrTicketUnknown, prp.ErrTicketForeign, prp.ErrTicketReplayed,
// prp.ErrTicketExpired) or prp.ErrTicketMalformed; none quotes the ticket.
func (x *Exchanger) Exchange(ctx context.Context, req ExchangeRequest, now time.Time) (ExchangeResponse, Claims, error) {
	resp, c, _, err := x.ExchangeTicket(ctx, req, now)
	return resp, c, err
}

// ExchangeTicket is Exchange that also returns the consumed ticket's
// record (its Resume and Holder fields say what the session is). For a
// resume ticket the token is for the record's Resume session and the
// response says Resume; the caller checks that the session exists.
func (x *Exchanger) ExchangeTicket(ctx context.Context, req ExchangeRequest, now time.Time) (ExchangeResponse, Claims, prp.TicketRecord, error) {
	t, err := prp.ParseTicket(req.Ticket)
	if err != nil {
		return ExchangeResponse{}, Claims{}, prp.TicketRecord{}, err
	}
	if !ValidID(req.Lease) {
		return ExchangeResponse{}, Claims{}, prp.TicketRecord{}, fmt.Errorf("%w: field lease is not a valid id", prp.ErrTicketMalformed)
	}
	fresh, err := prp.NewID("s")
	if err != nil {
		return ExchangeResponse{}, Claims{}, prp.TicketRecord{}, err
	}
	r, err := x.Store.ConsumeTicket(ctx, t.Hash(), req.Lease, fresh, now)
	if err != nil {
		return ExchangeResponse{}, Claims{}, prp.TicketRecord{}, err
	}
	session := fresh
	if r.Resume != "" {
		session = r.Resume
	}
	ttl := x.TokenTTL
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	if r.Scope == prp.ScopeProbe {
		ttl = min(ttl, MaxProbeTokenTTL)
	}
	c := Claims{Lease: r.Lease, Run: r.Run, Company: r.Company, Scope: r.Scope, Session: session, IssuedAt: now, ExpiresAt: now.Add(ttl)}
	tok, err := Mint(x.Signer, c)
	if err != nil {
		return ExchangeResponse{}, Claims{}, prp.TicketRecord{}, err
	}
	resp := ExchangeResponse{Token: tok, ExpiresAt: c.ExpiresAt, Session: session, Scope: r.Scope, Lease: r.Lease, Run: r.Run,
		Resume: r.Resume != "", StateKey: StateKey(x.Signer, session)}
	return resp, c, r, nil
}

// Renew mints a token with the claims of c and a new expiry from now, no
// later than notAfter (zero: no bound; the controller passes the end of
// the session's lease); the controller sends it in a TypeToken while the
// runner is connected.
func (x *Exchanger) Renew(c Claims, now, notAfter time.Time) (string, Claims, error) {
	if c.Scope == prp.ScopeProbe {
		// A probe identity is short-lived: never renewed past its first expiry.
		return "", Claims{}, fmt.Errorf("%w: a probe token is not renewed", prp.ErrScopeDenied)
	}
	c.IssuedAt, c.ExpiresAt = now, x.RenewedExpiry(now, notAfter)
	tok, err := Mint(x.Signer, c)
	return tok, c, err
}

// RenewedExpiry is the expiry Renew gives a token renewed at now: the
// token TTL from now, no later than notAfter (zero: no bound).
func (x *Exchanger) RenewedExpiry(now, notAfter time.Time) time.Time {
	ttl := x.TokenTTL
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	exp := now.Add(ttl)
	if !notAfter.IsZero() && notAfter.Before(exp) {
		exp = notAfter
	}
	return exp
}
