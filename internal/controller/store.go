package controller

import (
	"context"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
)

// Store errors.
var (
	// ErrIdempotencyConflict: a command id was used before in the session
	// with another body (another digest) (PRP-4).
	ErrIdempotencyConflict = errcode.New(errcode.Conflict, "controller: idempotency conflict")
	// ErrProofIncomplete: a stop could not be verified for every task; the
	// lease must stay pending cleanup (PRP-6).
	ErrProofIncomplete = errcode.New(errcode.Unavailable, "controller: stop proof incomplete")
)

// RunnerStore is the runner protocol's whole store: its one-use tickets
// and the controller's Store. store.Stores.Runners holds one, sealed
// (SealStore): the records are the protocol's own, so that only berth's
// stores (the memory one, store/sqlite and store/postgres) implement it.
type RunnerStore interface {
	prp.TicketStore
	Store
}

// SealStore returns s as a store.RunnerStore (a value of package store's
// own type, which embeds s): how berth's SQL stores fill
// store.Stores.Runners. Package store sets it in its init; berth.New
// reads the RunnerStore back with a type assertion.
var SealStore func(s RunnerStore) any

// Session is a runner session: created by the ticket exchange, resumed by
// every connection that presents a token for it.
type Session struct {
	ID        string
	Lease     string
	Run       string
	Company   string
	Scope     prp.Scope
	CreatedAt time.Time
	// Ticket is the hash of the ticket whose exchange created the
	// session (prp.TicketHash.String); Attach accepts only the session of
	// the ticket it minted.
	Ticket string
	// Holder marks a session created through the lease holder's Attach:
	// the lease's release (StopTasks) stops its tasks; the tasks of other
	// sessions of the lease were not given by the holder, and the release
	// never waits on them.
	Holder bool
	// ConnectedUntil is when the claim of the session's live connection
	// (Store.ClaimConnection, on any replica) ends; zero or past: no
	// runner is connected. Stores fill it in on reads; CreateSession
	// ignores it.
	ConnectedUntil time.Time
}

// CommandRecord is one entry of the controller's command journal (PRP-4):
// per session, Seq is contiguous from 1; ID is unique in the session.
type CommandRecord struct {
	Session string
	Seq     uint64
	Command prp.Command
	// State is JournalReceived until the runner's result is stored, then
	// JournalDone (or JournalIndeterminate for an indeterminate result).
	State     prp.JournalState
	Result    *prp.Result
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ConnectionClaim is a session's live connection (Store.ClaimConnection).
type ConnectionClaim struct {
	Session string
	Conn    string
}

// CommandCursor is how far a session's journal was read: Sent is the
// highest command seq its connection's writer sent (0: none).
type CommandCursor struct {
	Session string
	Sent    uint64
}

// OutputRef locates the bytes of one output event in an outputSink.
type OutputRef struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// EventRecord is the stored metadata of one runner event (PRP-5). For an
// output event, Event.Output.Data is nil and Ref locates the bytes.
type EventRecord struct {
	Session  string
	Seq      uint64
	Event    prp.Event
	Ref      *OutputRef
	StoredAt time.Time
}

// Store is what the controller persists: sessions, the command journal and
// event metadata. Implementations: memoryStore here and the SQL store of
// store/sqlite and store/postgres; each passes controllertest.RunStoreTests. A Store is safe
// for concurrent use, and for use by several controller replicas at once.
type Store interface {
	// CreateSession stores s; errcode.ErrAlreadyExists if a session with s.ID exists.
	CreateSession(ctx context.Context, s Session) error
	// GetSession returns the session with id, or errcode.ErrNotFound.
	GetSession(ctx context.Context, id string) (Session, error)
	// ClaimConnection records that connection conn is the session's live
	// connection until until, in one conditional update that succeeds
	// only if no other connection's claim on the session lasts past now
	// (on any replica); conn renews its own claim the same way. It
	// returns false, nil when another connection holds a live claim, and
	// errcode.ErrNotFound for an unknown session.
	ClaimConnection(ctx context.Context, session, conn string, until, now time.Time) (bool, error)
	// RenewConnections is ClaimConnection for each of claims, all with
	// until and now, in one write: a controller renews the claims of all
	// its connections whose heartbeat was answered in one call (issue
	// 55). It returns the claims it set, in no set order; a claim it did
	// not set (another connection's claim lasts past now, or the session
	// is not stored) is left out. Of two claims of one session at most
	// one is set.
	RenewConnections(ctx context.Context, claims []ConnectionClaim, until, now time.Time) ([]ConnectionClaim, error)
	// ReleaseConnection drops conn's claim on session, if it holds it.
	ReleaseConnection(ctx context.Context, session, conn string) error
	// LeaseSessions returns the sessions of lease, oldest first (by
	// CreatedAt, then id); none is an empty slice, not an error.
	LeaseSessions(ctx context.Context, lease string) ([]Session, error)
	// HandOverSession gives session, the session of a warm-pool member's
	// runner (its Company is authz.InstanceCompany), to the company and
	// run of the lease that adopted the member, in one conditional update
	// that succeeds only while the session is still the instance's. It
	// returns true when this call handed it over; false, nil when the
	// session is another company's (a session is handed over once, never
	// twice); errcode.ErrNotFound for an unknown session.
	HandOverSession(ctx context.Context, session, company, run string) (bool, error)

	// AppendCommand journals c in session under the next seq (last+1) in
	// one atomic step, so that two replicas never give two commands one
	// seq. If a command with c.ID is already journaled in session it
	// returns that record and existed true when the digests match, else
	// ErrIdempotencyConflict; nothing is journaled then.
	AppendCommand(ctx context.Context, session string, c prp.Command, now time.Time) (r CommandRecord, existed bool, err error)
	// GetCommand returns the command id of session, or errcode.ErrNotFound.
	GetCommand(ctx context.Context, session, id string) (CommandRecord, error)
	// CommandsAfter returns the commands of session with seq > after, in
	// seq order, at most limit (all if limit <= 0).
	CommandsAfter(ctx context.Context, session string, after uint64, limit int) ([]CommandRecord, error)
	// SessionsWithCommandsAfter returns the sessions of cursors (each
	// session at most once in them) whose journal holds a command with a
	// seq past the cursor's Sent, in no set order; none is an empty
	// slice. A session that is not stored has no command. It is one read
	// for all of them: a controller asks it once per Poll for all its
	// live connections (the journal poller, conn.go) and wakes the
	// writers of the sessions it returns, so that an idle connection
	// costs the store no read of its own.
	SessionsWithCommandsAfter(ctx context.Context, cursors []CommandCursor) ([]string, error)
	// CompleteCommand stores res as the result of command res.CommandID of
	// session and marks it done (indeterminate for an indeterminate
	// result). The first result wins: completing a completed command
	// changes nothing and returns the stored record. errcode.ErrNotFound if the
	// command is not journaled.
	CompleteCommand(ctx context.Context, session string, res prp.Result, now time.Time) (CommandRecord, error)

	// PutEvent stores r idempotently on (r.Session, r.Seq): it returns true
	// if r was stored, false if an event with that seq already was (the
	// stored one is kept).
	PutEvent(ctx context.Context, r EventRecord) (bool, error)
	// EventsAfter returns the events of session with seq > after, in seq
	// order, at most limit (all if limit <= 0).
	EventsAfter(ctx context.Context, session string, after uint64, limit int) ([]EventRecord, error)
	// LastEventSeq returns the highest event seq stored for session (0:
	// none). The controller stores events only in seq order, so this is
	// the cumulative ack.
	LastEventSeq(ctx context.Context, session string) (uint64, error)

	// ClaimSecrets records, in one compare-and-swap, that the secret
	// values of command id of session are being delivered: true for the
	// one call (on any replica) that made the claim, false for every call
	// after it. The controller sends a secrets frame only after a claim
	// returned true, so a value goes out at most once per command, across
	// reconnects and replicas. errcode.ErrNotFound if the command is not
	// journaled.
	ClaimSecrets(ctx context.Context, session, id string, now time.Time) (bool, error)

	// OutputUsage returns the output accounting stored for task of
	// session (task "": the session's totals); the zero OutputUsage if
	// none is stored.
	OutputUsage(ctx context.Context, session, task string) (OutputUsage, error)
	// PutOutputUsage stores each of us for its task of session, in one
	// step, keeping a stored one whose Seq is not below the new one's (a
	// slower replica never moves a counter back). The session's totals
	// (task "") also count as stored events for LastEventSeq: events the
	// controller discarded have no record, yet are acked.
	PutOutputUsage(ctx context.Context, session string, us []TaskUsage) error
}

// OutputUsage is the output accounting of a session or of one of its
// tasks (issue 22 item 4), as of event Seq: the bytes and events stored,
// the output bytes discarded past a limit (Truncated), and the events
// discarded whole (Discarded: past the session's event cap, of a task not
// started in the session, or on a probe session). For a task, Events and
// Discarded are not kept.
type OutputUsage struct {
	Seq       uint64 `json:"seq"`
	Bytes     int64  `json:"bytes"`
	Events    int64  `json:"events"`
	Truncated int64  `json:"truncated"`
	Discarded int64  `json:"discarded"`
}

// TaskUsage is the OutputUsage of Task ("": the session's totals).
type TaskUsage struct {
	Task  string
	Usage OutputUsage
}

// EventBatcher is an optional interface that may be implemented by a
// Store. If a Store implements it, the controller stores the metadata of
// the events it read while the previous write ran in one PutEvents call
// (up to maxEventBatch events, one transaction: one sync of a SQL store's
// log instead of one per event). If a Store does not implement it, the
// controller calls PutEvent for each event.
type EventBatcher interface {
	// PutEvents stores rs like PutEvent, each idempotently on (session,
	// seq), all or none; they are durable when it returns.
	PutEvents(ctx context.Context, rs []EventRecord) error
}

// maxEventBatch is the most events the controller stores in one
// EventBatcher.PutEvents call.
const maxEventBatch = 64

// IntakeBatch is what one connection's intake stores at once: events of
// Session (their bytes in the sink, synced before the ack), the results
// among them, and the session's output usage after them
// (PutOutputUsage's us).
type IntakeBatch struct {
	Session string
	Events  []EventRecord
	Usage   []TaskUsage
}

// GroupIntaker is an optional interface that may be implemented by a
// Store. If a Store implements it, the controller stores the batches that
// many connections read while the previous commit ran in one PutIntake
// call (group commit: one transaction and one sync of a SQL store's log
// for many sessions, issue 55), instead of a PutEvents and a
// PutOutputUsage per connection and batch.
type GroupIntaker interface {
	// PutIntake stores each batch as PutEvents (each event idempotently
	// on (session, seq)), then CompleteCommand for each result event
	// (Kind prp.EventResult: its Result at its StoredAt; a command not
	// journaled is skipped, a terminal one kept, even if the event was
	// stored before), then PutOutputUsage would, all batches or none;
	// they are durable when it returns. The results go in the events'
	// transaction: a runner is welcomed back from the last stored event
	// and never sends it again, so a result stored without its command's
	// completion would leave that command waiting forever (issue 55).
	PutIntake(ctx context.Context, bs []IntakeBatch) error
}
