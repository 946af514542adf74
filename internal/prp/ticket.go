package prp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berthdev/berth/errcode"
)

// Scope is what a ticket or a token is for.
type Scope string

// The scopes.
const (
	// ScopeTask: a runner that executes tasks for one lease and run.
	ScopeTask Scope = "task"
	// ScopeProbe: a read-only probe identity; it answers hello and refuses
	// every task (PRP-8).
	ScopeProbe Scope = "probe"
)

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return s == ScopeTask || s == ScopeProbe }

// ticketPrefix starts every ticket's text form.
const ticketPrefix = "prpt1_"

// ticketLen is the length of a ticket's text form: prefix + 43 base64url
// characters of 32 random bytes.
var ticketLen = len(ticketPrefix) + base64.RawURLEncoding.EncodedLen(32)

// Ticket errors, each with a stable code on the wire, its reason
// (errcode.ReasonOf). The exchange answers them
// with HTTP 401 before any upgrade.
var (
	// ErrTicketMalformed: the text is not a ticket.
	ErrTicketMalformed = wireError(errcode.AuthFailed, "ticket_malformed", "prp: ticket malformed")
	// ErrTicketUnknown: no ticket with that hash exists.
	ErrTicketUnknown = wireError(errcode.AuthFailed, "ticket_unknown", "prp: ticket unknown")
	// ErrTicketExpired: the ticket's expiry has passed.
	ErrTicketExpired = wireError(errcode.AuthFailed, "ticket_expired", "prp: ticket expired")
	// ErrTicketReplayed: the ticket was already exchanged.
	ErrTicketReplayed = wireError(errcode.AuthFailed, "ticket_replayed", "prp: ticket replayed")
	// ErrTicketForeign: the ticket belongs to another lease than the one
	// the exchange is for.
	ErrTicketForeign = wireError(errcode.AuthFailed, "ticket_foreign", "prp: ticket foreign")
	// ErrTicketExists: a ticket with that hash was already created.
	ErrTicketExists = wireError(errcode.AlreadyExists, "ticket_exists", "prp: ticket exists")
)

// Ticket is a one-use bootstrap secret (PRP-2): 32 random bytes. Only its
// Hash is ever stored.
type Ticket struct{ b [32]byte }

// TicketHash is the SHA-256 of a ticket's bytes, the only form stored.
type TicketHash [32]byte

// String returns the hash in hex.
func (h TicketHash) String() string { return hex.EncodeToString(h[:]) }

// NewTicket returns a fresh ticket from crypto/rand.
func NewTicket() (Ticket, error) {
	var t Ticket
	if _, err := rand.Read(t.b[:]); err != nil {
		return Ticket{}, fmt.Errorf("prp: new ticket: %w", err)
	}
	return t, nil
}

// String returns the ticket's text form, the secret to hand to the runner.
func (t Ticket) String() string {
	return ticketPrefix + base64.RawURLEncoding.EncodeToString(t.b[:])
}

// Hash returns the ticket's hash.
func (t Ticket) Hash() TicketHash { return sha256.Sum256(t.b[:]) }

// ParseTicket parses a ticket's text form; surrounding whitespace (a
// trailing newline in a file) is ignored. The error never quotes the input.
func ParseTicket(s string) (Ticket, error) {
	s = strings.TrimSpace(s)
	if len(s) != ticketLen || !strings.HasPrefix(s, ticketPrefix) {
		return Ticket{}, fmt.Errorf("%w: want %d characters starting with %q", ErrTicketMalformed, ticketLen, ticketPrefix)
	}
	var t Ticket
	n, err := base64.RawURLEncoding.Strict().Decode(t.b[:], []byte(s[len(ticketPrefix):]))
	if err != nil || n != 32 {
		return Ticket{}, fmt.Errorf("%w: not base64url of 32 bytes", ErrTicketMalformed)
	}
	return t, nil
}

// TicketRecord is what a store holds of a ticket: its hash and what it
// grants. UsedAt is zero until the exchange.
type TicketRecord struct {
	Hash      TicketHash
	Lease     string
	Run       string
	Company   string
	Scope     Scope
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    time.Time
	// Session is the session the exchange created or, for a resume
	// ticket, rejoined (empty before).
	Session string
	// Resume, when set, makes this a resume ticket: its exchange creates
	// no session but mints a token for the existing session Resume (of
	// the same lease, run and scope), so that a restarted runner rejoins
	// it with its state directory (PRP-5) without stored credentials.
	Resume string
	// Holder marks a ticket the lease's holder minted through the
	// controller's Attach: the session it creates (or resumes) is one the
	// holder's tasks go to and the lease's release stops.
	Holder bool
}

// wireError is a sentinel of the protocol: an *errcode.Error of code whose
// reason is the wire code c (unchanged for deployed runners) and whose
// text is text.
func wireError(code errcode.ErrorCode, c, text string) error {
	return &errcode.Error{Code: code, Reason: c, Err: errors.New(text)}
}
