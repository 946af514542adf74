// Package templatehook builds the templates Service that berth.New hands
// out as System.Templates, and the envhook.UsageReporter it wires into
// the catalog (CONVENTIONS 24): the Service's collaborators are the
// System's own stores, lease manager and secret store, so no host or
// driver author constructs one; the System's sweep and berth's own tests
// reach the rest through it. Package templates sets its hooks in its init.
package templatehook

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/lease"
)

// Sources are what a templates Service reads and acts through; every
// field is required.
type Sources struct {
	// Templates is the template and history store: a templates.Store
	// (sealed; Records inside).
	Templates any
	// Environments holds the environment records whose ActiveTemplate the
	// service changes by compare-and-swap on the revision.
	Environments environment.Store
	// Drivers resolves environment drivers.
	Drivers *drivers.Registry
	// Leases hands out the handle of a live lease to capture
	// (lease.Manager.Open).
	Leases *lease.Manager
	// LeaseRecords is the lease store, read to find live leases that use a
	// template before deleting it (IMG-8).
	LeaseRecords lease.Store
	// Secrets resolves the secret references of an environment's config
	// for a provider deletion and the setup checks (the host's
	// SecretStore.Get); nil: a deletion that needs a credential fails and
	// stays wanted.
	Secrets func(ctx context.Context, ref config.SecretRef) (string, error)
	// Authorizer decides every action of the Service (the System's); nil:
	// authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Logger receives failures of best-effort steps (the System's); nil:
	// discard.
	Logger *slog.Logger
}

// New returns the *templates.Service over src with opts (a
// *templates.Options, or nil), and the envhook.UsageReporter that
// lists the active setup sessions of an environment for the catalog's
// blast radius (CFG-7). It acts for no principal, so it is no method of
// the Service.
var New func(src Sources, opts any) (svc any, usage envhook.UsageReporter[environment.Usage])

// SweepSessions runs the setup sessions' part of System.Sweep on svc (a
// *templates.Service): it ends the sessions past their TTL, destroys the
// sandboxes of ended ones and prunes expired terminal tokens, and returns
// the templates.SessionSweepReport. p needs authz.ActionSweep.
var SweepSessions func(svc any, ctx context.Context, p authz.Principal) (report any, err error)

// SetTerminalRing sets the output ring each PTY of h (an http.Handler of
// templates.Service.TerminalHandler) keeps for reconnects to n bytes
// (default 1 MiB), before h serves; berth's own tests use it.
var SetTerminalRing func(h http.Handler, n int)

// Filter selects templates in Records.ListTemplates and setup sessions in
// Records.ListSessions; zero fields match everything.
type Filter struct {
	Environment string
	// DeleteWanted matches only templates whose deletion is wanted
	// (ListTemplates; ListSessions ignores it).
	DeleteWanted bool
	// Active matches only sessions in an active state (ListSessions;
	// ListTemplates ignores it).
	Active bool
}

// ErrTokenInvalid is what Records.RedeemTerminalToken returns (wrapped)
// for a terminal token that is unknown, used or expired, and what the
// templates Service's terminal handler refuses a token with when it was
// presented for another session, path or principal (reason
// terminal_token_invalid, code auth_failed; the handler answers 401).
var ErrTokenInvalid error = &errcode.Error{Code: errcode.AuthFailed, Reason: "terminal_token_invalid", Err: errors.New("custom: terminal token invalid, used or expired")}

// TerminalToken is the stored record of a terminal token
// (templates.Service.MintTerminalToken): the token itself is never kept.
type TerminalToken struct {
	// Hash is the hex SHA-256 of the token together with the principal
	// (its ID and Role) it was minted for and the URL path it may be
	// redeemed on: the service presents the hash of what a request
	// carries, so a store matches the hash only.
	Hash    string `json:"hash"`
	Session string `json:"session"`
	// ExpiresAt is the end of the 60 seconds it may be redeemed in.
	ExpiresAt time.Time `json:"expiresAt"`
}

// Records is the store behind the sealed templates.Store, T, S, E and SE
// being *templates.Template, *templates.Session, *templates.Event and
// *templates.SessionEvent: berth's memory store and
// store/internal/sqlstore implement it, and templates/templatestest is its
// suite. It persists templates and the pointer history, the setup
// sessions, their progress events and terminal tokens; it is safe for
// concurrent use and stores and returns deep copies.
type Records[T, S, E, SE any] interface {
	// InsertTemplate stores t (Version must be 1); errcode.ErrConflict if the id
	// is taken.
	InsertTemplate(ctx context.Context, t T) error
	// GetTemplate returns the template, or an error wrapping errcode.ErrNotFound.
	GetTemplate(ctx context.Context, id string) (T, error)
	// ListTemplates returns the matching templates by CreatedAt, then id.
	ListTemplates(ctx context.Context, f Filter) ([]T, error)
	// UpdateTemplate replaces template t.ID if its stored Version is
	// t.Version-1; otherwise errcode.ErrConflict (errcode.ErrNotFound if absent) and
	// nothing changes.
	UpdateTemplate(ctx context.Context, t T) error
	// AppendEvent appends e to its environment's history, setting e.Seq
	// to one more than the environment's last.
	AppendEvent(ctx context.Context, e E) error
	// ListEvents returns the environment's events by Seq.
	ListEvents(ctx context.Context, environment string) ([]E, error)

	// InsertSession stores s (Version must be 1): errcode.ErrConflict if the id is
	// taken, an error wrapping templates.ErrSessionActive if s is active and its
	// environment has an active session already (a unique constraint:
	// of concurrent inserts, also from several processes, one wins).
	InsertSession(ctx context.Context, s S) error
	// GetSession returns the session, or an error wrapping
	// errcode.ErrNotFound.
	GetSession(ctx context.Context, id string) (S, error)
	// ListSessions returns the matching sessions by CreatedAt, then id.
	ListSessions(ctx context.Context, f Filter) ([]S, error)
	// UpdateSession replaces session s.ID if its stored Version is
	// s.Version-1; otherwise errcode.ErrConflict (errcode.ErrNotFound if absent).
	UpdateSession(ctx context.Context, s S) error
	// AppendSessionEvent appends e to its session's events, setting e.Seq
	// to one more than the session's last.
	AppendSessionEvent(ctx context.Context, e SE) error
	// ListSessionEvents returns the session's events with Seq > after, by
	// Seq.
	ListSessionEvents(ctx context.Context, session string, after int64) ([]SE, error)
	// InsertTerminalToken stores a terminal token's record (its hash,
	// never the token); errcode.ErrConflict if the hash is taken.
	InsertTerminalToken(ctx context.Context, t *TerminalToken) error
	// RedeemTerminalToken marks the token record with hash used and
	// returns it, if it exists, is unused and expires after now; else an
	// error wrapping templates.ErrTokenInvalid, and nothing changes. The
	// match and the mark are one step. Of concurrent redemptions, also
	// from several processes, one wins.
	RedeemTerminalToken(ctx context.Context, hash string, now time.Time) (*TerminalToken, error)
	// PruneTerminalTokens removes the token records that expire before
	// before (used or not: none can be redeemed any more) and returns how
	// many it removed.
	PruneTerminalTokens(ctx context.Context, before time.Time) (int, error)
}

var (
	// Seal returns the Records s as a templates.Store
	// (store/internal/sqlstore's Stores().Templates).
	Seal func(s any) any
	// Unseal returns the Records inside the templates.Store s
	// (templates/templatestest, tests).
	Unseal func(s any) any
	// NewMemoryStore returns an empty in-memory templates.Store: the
	// embedded default (store.Memory). It is safe for concurrent use;
	// each operation is atomic under one lock.
	NewMemoryStore func() any
)
