package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/internal/prpwire"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/prp"
)

// The session-level calls below are the controller's internals under the
// names the tests used before the Task handle (Attachment.Start,
// Task.Wait, Task.Stop) became the one public way: the tests drive
// sessions of runners they launch by hand, and hostile commands that no
// handle would build.

// Dispatch is dispatch, for tests.
func (c *Controller) Dispatch(ctx context.Context, p authz.Principal, session string, cmd prp.Command) (CommandRecord, error) {
	return c.dispatch(ctx, p, session, cmd)
}

// Wait is wait, for tests.
func (c *Controller) Wait(ctx context.Context, p authz.Principal, session, id string) (prp.Result, error) {
	return c.wait(ctx, p, session, id)
}

// Follow is follow, for tests.
func (c *Controller) Follow(ctx context.Context, p authz.Principal, session string, after uint64, fn func(StoredEvent) error) error {
	return c.follow(ctx, p, session, after, nil, fn)
}

// StartTask dispatches task.start of ts with command id, for tests.
func (c *Controller) StartTask(ctx context.Context, p authz.Principal, session, id string, ts prp.TaskStart) (CommandRecord, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return CommandRecord{}, err
	}
	return c.dispatch(ctx, p, session, prp.Command{ID: id, Kind: prp.CommandTaskStart, Lease: s.Lease, Run: s.Run, TaskStart: &ts})
}

// StopTask dispatches task.stop of task with grace and command id, for
// tests.
func (c *Controller) StopTask(ctx context.Context, p authz.Principal, session, id, task string, grace time.Duration) (CommandRecord, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return CommandRecord{}, err
	}
	return c.dispatch(ctx, p, session, prp.Command{ID: id, Kind: prp.CommandTaskStop, Lease: s.Lease, Run: s.Run, TaskStop: &prp.TaskStop{TaskID: task, Grace: grace}})
}

// StopAndVerify (for tests: the session-wide stop the tests written
// before the Task handle use) authorizes p on session, stops every task the session
// started (task.stop with grace, each under a fresh command id) and
// returns the runner's proofs, one per task, in start order, each with
// Evidence drivers.EvidenceRunnerAttested: the runner's word, which never
// ends a lease alone (release the lease for a proof from outside). A proof counts
// only if it is complete, names no survivor and no failed check, and both
// the group check and the tag scan ran. If a proof does not count or a stop
// was refused, it returns the proofs with an error
// wrapping ErrProofIncomplete naming the tasks: the lease must stay pending
// cleanup (PRP-6). Tasks whose start was rejected (nothing ran) are
// skipped. ctx bounds the wait for the runner.
func (c *Controller) StopAndVerify(ctx context.Context, p authz.Principal, session string, grace time.Duration) ([]Proof, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return nil, err
	}
	cmds, err := c.o.Store.CommandsAfter(ctx, s.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	var tasks []string
	seen := map[string]bool{}
	for _, r := range cmds {
		if r.Command.Kind != prp.CommandTaskStart || seen[prpwire.CommandTaskID(r.Command)] {
			continue
		}
		if r.Result != nil && r.Result.Status == prp.ResultRejected {
			continue
		}
		seen[prpwire.CommandTaskID(r.Command)] = true
		tasks = append(tasks, prpwire.CommandTaskID(r.Command))
	}
	ids := make([]string, len(tasks))
	for i, task := range tasks {
		if ids[i], err = prp.NewID("stop"); err != nil {
			return nil, err
		}
		if _, err := c.StopTask(ctx, p, s.ID, ids[i], task, grace); err != nil {
			return nil, err
		}
	}
	var proofs []Proof
	var bad []error
	for i, task := range tasks {
		res, err := c.Wait(ctx, p, s.ID, ids[i])
		if err != nil {
			return proofs, err
		}
		switch {
		case res.Proof == nil:
			bad = append(bad, fmt.Errorf("task %s: stop %s (%s): no proof", task, res.Status, res.Code))
		case !verified(*res.Proof):
			proofs = append(proofs, Proof{StopProof: *res.Proof, Evidence: drivers.EvidenceRunnerAttested})
			bad = append(bad, fmt.Errorf("task %s: survivors %v, checks that could not run %v", task, res.Proof.Survivors, res.Proof.Failed))
		default:
			proofs = append(proofs, Proof{StopProof: *res.Proof, Evidence: drivers.EvidenceRunnerAttested})
		}
	}
	if len(bad) > 0 {
		return proofs, fmt.Errorf("controller: stop of session %s: %w: %w", s.ID, ErrProofIncomplete, errors.Join(bad...))
	}
	return proofs, nil
}

// SecretFrames returns how many secrets frames c sent.
func SecretFrames(c *Controller) int64 { return c.secretFrames.Load() }

// PrintableLog is printableLog, for tests.
func PrintableLog(b []byte, max int) string { return printableLog(b, max) }

// JournalReadBatch is journalReadBatch, for tests.
const JournalReadBatch = journalReadBatch

// Handovers counts the pool sessions whose token a writer of c renewed
// for the adopting lease, for tests.
func (c *Controller) Handovers() int64 { return c.handovers.Load() }

// Attached reports whether an ingress server of lease is attached in this
// process, for tests.
func (c *Controller) Attached(lease string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attached[lease] != nil
}

// LostRange is lostRange, for tests.
type LostRange = lostRange

// EventsLost is eventsLost, for tests.
func (c *Controller) EventsLost(ctx context.Context, p authz.Principal, session string) ([]LostRange, error) {
	return c.eventsLost(ctx, p, session)
}

// Hello is sessionHello, for tests.
func (c *Controller) Hello(ctx context.Context, p authz.Principal, session string) (prpwire.Hello, bool, error) {
	return c.sessionHello(ctx, p, session)
}

// MintResumeTicket is mintResumeTicket, for tests.
func (c *Controller) MintResumeTicket(ctx context.Context, p authz.Principal, session string, ttl time.Duration) (prp.Ticket, prp.TicketRecord, error) {
	return c.mintResumeTicket(ctx, p, session, ttl)
}

// OutputFrom is outputFrom, for tests.
func (c *Controller) OutputFrom(ctx context.Context, p authz.Principal, session, task string, stream prp.Stream, from int64, limit int) ([]byte, error) {
	return c.outputFrom(ctx, p, session, task, stream, from, limit)
}

// OutputStatus is outputStatus, for tests.
func (c *Controller) OutputStatus(ctx context.Context, p authz.Principal, session, task string) (OutputUsage, error) {
	return c.outputStatus(ctx, p, session, task)
}

// WithLimits returns o with the session limits l (the welcome's; zero
// fields take the defaults), for tests.
func WithLimits(o Options, l prpwire.Welcome) Options { o.limits = l; return o }

// WithTokenTTL returns o with task tokens that live ttl, for tests.
func WithTokenTTL(o Options, ttl time.Duration) Options { o.tokenTTL = ttl; return o }

// WithJSONOutput returns o that withholds binary output frames when on,
// for tests.
func WithJSONOutput(o Options, on bool) Options { o.jsonOutput = on; return o }

// Lease returns the lease id the runner serves, for tests.
func (a *Attachment) Lease() string { return a.lease }

// Scope returns the runner's identity, for tests.
func (a *Attachment) Scope() prp.Scope { return a.scope }

// CommandID returns the id of the task's task.start command, for tests.
func (t *Task) CommandID() string { return t.cmd }

// Session returns the runner session the task runs in, for tests.
func (t *Task) Session() string { return t.session }

// Connected is isConnected, for tests.
func (c *Controller) Connected(session string) bool { return c.isConnected(session) }

// HoldInflight adds n to the output bytes the controller counts in flight
// (admission control), for tests.
func (c *Controller) HoldInflight(n int64) { c.adm.inflight.Add(n) }
