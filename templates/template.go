package templates

import (
	"errors"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/templatehook"
)

// State is a template's lifecycle state: captured -> active <-> superseded;
// any -> revoked -> deleted; failed for a capture that did not finish.
type State string

// The template states.
const (
	// StateCaptured: captured, never promoted.
	StateCaptured State = "captured"
	// StateActive: the environment's active pointer names it.
	StateActive State = "active"
	// StateSuperseded: it was active and another promote replaced it; a
	// rollback promotes it again.
	StateSuperseded State = "superseded"
	// StateRevoked: disabled; never promoted again. Its deletion at the
	// provider may be wanted (Template.DeleteWanted).
	StateRevoked State = "revoked"
	// StateDeleted: deleted at the provider, with the receipt stored.
	StateDeleted State = "deleted"
	// StateFailed: the capture failed; nothing usable exists.
	StateFailed State = "failed"
)

// Template is a captured image of an environment (IMG-4, IMG-6).
type Template struct {
	ID          string `json:"id"`
	Environment string `json:"environment"`
	// Name is the human-readable name given at capture.
	Name   string `json:"name,omitempty"`
	Driver string `json:"driver"`
	State  State  `json:"state"`
	// Identity is the immutable image identity in its text form
	// (images.Identity.String): a digest-pinned reference for Docker, a
	// snapshot id for Daytona and the fake. A provider internal: left out
	// of the redacted view.
	Identity string `json:"identity,omitempty"`
	// SourceFingerprint is the environment's source fingerprint
	// (qualify.SourceFingerprint) the template was captured from;
	// it applies only while the environment's current one equals it
	// (IMG-6).
	SourceFingerprint string `json:"sourceFingerprint,omitempty"`
	// ContentHash is the hash of the scripted setup inputs (set by setup
	// sessions; empty for a plain capture).
	ContentHash string `json:"contentHash,omitempty"`
	// SetupSession is the setup session that captured it ("" for a plain
	// capture).
	SetupSession string `json:"setupSession,omitempty"`
	// Lease is the lease captured from (a provider internal).
	Lease     string    `json:"lease,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
	// FailureReason says why a capture failed (StateFailed).
	FailureReason string    `json:"failureReason,omitempty"`
	RevokedAt     time.Time `json:"revokedAt,omitzero"`
	RevokedBy     string    `json:"revokedBy,omitempty"`
	RevokeReason  string    `json:"revokeReason,omitempty"`
	// DeleteWanted records that deletion at the provider was asked for and
	// has not been confirmed yet; Service.Sweep retries it.
	DeleteWanted bool `json:"deleteWanted,omitempty"`
	// DeleteNote says why the last deletion attempt did not delete (a live
	// lease uses it, the provider answered in use, an error).
	DeleteNote string `json:"deleteNote,omitempty"`
	// DeleteReceipt is the provider's confirmed receipt of the deletion.
	DeleteReceipt *drivers.Receipt `json:"deleteReceipt,omitempty"`
	// Version starts at 1 and grows by one on every store update.
	Version int64 `json:"version"`
	// Redacted reports a view without provider internals (identity,
	// source fingerprint, lease, receipt evidence).
	Redacted bool `json:"redacted,omitempty"`
}

// clone returns a deep copy of t.
func (t *Template) clone() *Template {
	if t == nil {
		return nil
	}
	c := *t
	if t.DeleteReceipt != nil {
		r := *t.DeleteReceipt
		c.DeleteReceipt = &r
	}
	return &c
}

// The pointer changes (Event.Action).
const (
	actionPromote  = "promote"
	actionRollback = "rollback"
	actionRevoke   = "revoke"
)

// Event is one change of an environment's active pointer, in the
// append-only history: who, when, from, to, why.
type Event struct {
	// Seq orders an environment's events; the store assigns it.
	Seq         int64  `json:"seq"`
	Environment string `json:"environment"`
	// Action says what the change did to the pointer: "promote" (it moved
	// to a captured template), "rollback" (it moved back to a superseded
	// template: a new promote, nothing undone in place) or "revoke" (the
	// active template was revoked and the pointer cleared, with no fall
	// back to the previous one).
	Action string `json:"action"`
	// From and To are template ids; "" for no template.
	From   string    `json:"from,omitempty"`
	To     string    `json:"to,omitempty"`
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
	// Revision is the environment revision the change wrote.
	Revision int64 `json:"revision"`
}

// Store persists templates, the pointer history and the setup sessions
// with their events and terminal tokens. Its records move with the setup
// flow, so it is sealed, like store.RunnerStore: only berth's stores
// implement it (store.Memory's, store/sqlite's and store/postgres's
// Stores().Templates), templates/templatestest is their conformance
// suite, and a host passes the one its store constructor returns. A
// store of another author sets it from store.Memory() (templates and
// sessions then live in this process).
type Store interface {
	templatesStore()
}

// records is the store inside a Store; filter and terminalToken its
// filter and token record.
type (
	records       = templatehook.Records[*Template, *Session, *Event, *SessionEvent]
	filter        = templatehook.Filter
	terminalToken = templatehook.TerminalToken
)

// sealedStore is the one implementation of Store.
type sealedStore struct{ records }

func (sealedStore) templatesStore() {}

// unseal returns the records inside s.
func unseal(s any) records {
	if s, ok := s.(sealedStore); ok {
		return s.records
	}
	return nil
}

// The errors of the custom images contract that are no store's: a host
// tells them by errcode.ReasonOf.
var (
	// errSourceMismatch (reason "source_mismatch"): the template was captured from another source
	// config than the environment's current one (IMG-6); it cannot be
	// promoted until the change is undone.
	errSourceMismatch error = &errcode.Error{Code: errcode.Conflict, Reason: "source_mismatch", Err: errors.New("custom: template does not match the environment's source config")}
)
