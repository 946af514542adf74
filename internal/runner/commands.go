package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// queued is a command received on the connection, in seq order.
type queued struct {
	seq uint64
	cmd prp.Command
}

// cmdQueue hands commands from the connection's reader to the command loop
// without ever blocking the reader (which must keep reading acks while the
// command loop waits for outbox space).
type cmdQueue struct {
	mu     sync.Mutex
	items  []queued
	ready  chan struct{}
	closed bool
}

func newCmdQueue() *cmdQueue { return &cmdQueue{ready: make(chan struct{}, 1)} }

func (q *cmdQueue) push(x queued) {
	q.mu.Lock()
	q.items = append(q.items, x)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *cmdQueue) pop(ctx context.Context) (queued, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			x := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			return x, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return queued{}, false
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			return queued{}, false
		}
	}
}

func (q *cmdQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// commandLoop handles queued commands until ctx ends; tasks run under
// taskCtx, which outlives ctx until the runner's shutdown.
func (r *Runner) commandLoop(ctx, taskCtx context.Context) {
	for {
		x, ok := r.queue.pop(ctx)
		if !ok {
			return
		}
		r.handleCommand(taskCtx, x.seq, x.cmd)
		select {
		case r.ackNudge <- struct{}{}:
		default:
		}
	}
}

// handleCommand runs one command at most once (PRP-4): the journal decides
// whether it is new, a duplicate (answered from the journal, marked
// Duplicate), a conflict (same id, other digest) or still executing.
func (r *Runner) handleCommand(ctx context.Context, seq uint64, c prp.Command) {
	// Taken whatever happens next: values are used at most once.
	sv, haveSecrets := r.takeSecrets(c.ID)
	needSecrets := c.TaskStart != nil && len(c.TaskStart.Secrets) > 0
	if e, ok := r.j.lookup(c.ID); ok {
		r.journalSeq(seq)
		switch {
		case e.Digest != c.Digest:
			r.emit(ctx, resultEvent(prp.Result{CommandID: c.ID, Status: prp.ResultRejected, Code: prpwire.CodeIdempotencyConflict,
				Message: "command " + c.ID + " was received before with another body"}))
			return
		case e.State.Terminal():
			res := *e.Result
			res.Duplicate = true
			r.emit(ctx, resultEvent(res))
			return
		case e.State == prp.JournalExecuting:
			return // its result follows when it ends
		}
		// Received but never executing: it did not start; run it now.
	} else if err := r.j.recordUnsynced(journalEntry{Seq: seq, ID: c.ID, Digest: c.Digest, Kind: c.Kind, TaskID: prpwire.CommandTaskID(c), State: prp.JournalReceived, Secrets: needSecrets}); err != nil {
		r.log.Error("runner: journal", "command", c.ID, "err", err)
		return
	}
	r.mu.Lock()
	cred := r.cred
	r.mu.Unlock()
	switch {
	case cred.Scope != prp.ScopeTask:
		r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeProbeIdentity, Message: "a probe identity runs no task"})
		return
	case c.Lease != cred.Lease || c.Run != cred.Run:
		r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeScopeDenied,
			Message: "command for lease " + c.Lease + " run " + c.Run + " on a runner of another lease or run"})
		return
	}
	if needSecrets {
		switch {
		case !haveSecrets:
			r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeSecretsMissing,
				Message: "task " + prpwire.CommandTaskID(c) + " needs secret values and none arrived for command " + c.ID + "; nothing ran"})
			return
		case sv.Code != "":
			r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeSecretsUnavailable,
				Message: sv.Code + ": " + sv.Message})
			return
		case len(sv.Values) != len(c.TaskStart.Secrets):
			r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeSecretsMissing,
				Message: fmt.Sprintf("task %s needs %d secret values, %d arrived; nothing ran", prpwire.CommandTaskID(c), len(c.TaskStart.Secrets), len(sv.Values))})
			return
		}
	}
	switch c.Kind {
	case prp.CommandTaskStart:
		r.startTask(ctx, c, sv.Values)
	case prp.CommandTaskStop:
		r.stopCommand(ctx, c)
	}
}

// journalSeq advances the journal's command seq for a redelivered command.
func (r *Runner) journalSeq(seq uint64) {
	if seq > r.j.last() {
		if err := r.j.record(journalEntry{Seq: seq}); err != nil {
			r.log.Error("runner: journal", "seq", seq, "err", err)
		}
	}
}

// finish journals c as done with res, then emits the result. A stop's
// lines are not synced (see stopCommand).
func (r *Runner) finish(ctx context.Context, c prp.Command, res prp.Result) {
	res.CommandID = c.ID
	record := r.j.record
	if c.Kind == prp.CommandTaskStop {
		record = r.j.recordUnsynced
	}
	if err := record(journalEntry{ID: c.ID, State: prp.JournalDone, Result: &res}); err != nil {
		r.log.Error("runner: journal", "command", c.ID, "err", err)
	}
	r.emit(ctx, resultEvent(res))
}

func resultEvent(res prp.Result) prp.Event { return prp.Event{Kind: prp.EventResult, Result: &res} }

// stopCommand stops a task (running, ended or left by a previous runner)
// and answers with the proof (PRP-6).
func (r *Runner) stopCommand(ctx context.Context, c prp.Command) {
	id := c.TaskStop.TaskID
	r.mu.Lock()
	t := r.tasks[id]
	r.mu.Unlock()
	var pgid int
	var since uint64
	if t != nil {
		pgid, since = t.pgid, t.since
	} else if e, ok := r.j.taskStart(id); ok {
		pgid, since = e.PGID, e.Since
	} else {
		r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeUnknownTask, Message: "no task " + id + " was started here"})
		return
	}
	// A stop is idempotent: running it again stops nothing more and
	// verifies again. So its journal lines are written but not synced:
	// they survive a runner kill -9 (the page cache keeps them), and a
	// machine crash that loses them leaves a stop that the controller
	// sends again (the resume cursor no longer counts it), never a task
	// run twice. This keeps two fsyncs off the stop-to-proof path.
	if err := r.j.recordUnsynced(journalEntry{ID: c.ID, State: prp.JournalExecuting}); err != nil {
		r.log.Error("runner: journal", "command", c.ID, "err", err)
		return
	}
	go func() {
		proof := r.stopTask(ctx, id, pgid, since, c.TaskStop.Grace)
		if t != nil && proof.Complete && len(proof.Survivors) == 0 {
			// The task's exit event comes before the proof and the stop's
			// result, so a controller that has the proof has the exit
			// too. With its group and tag gone, the task's goroutine has
			// only the pipes to drain and the leader to reap; a process
			// that escaped both and holds a pipe open delays the proof by
			// exitWait at most.
			wait := time.NewTimer(exitWait)
			select {
			case <-t.done:
			case <-wait.C:
			case <-ctx.Done():
			}
			wait.Stop()
		}
		r.emit(ctx, prp.Event{Kind: prp.EventProof, TaskID: id, Proof: &proof})
		r.finish(ctx, c, prp.Result{Status: prp.ResultDone, Proof: &proof})
	}()
}

// maxPendingSecrets bounds the secrets frames kept for commands not yet
// handled; a controller sends one right before its command, so more than
// a queue's worth means a misbehaving peer.
const maxPendingSecrets = 256

// keepSecrets keeps sv in memory until its command is handled.
func (r *Runner) keepSecrets(sv prpwire.SecretValues) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.secrets) >= maxPendingSecrets {
		for id := range r.secrets {
			delete(r.secrets, id)
			break
		}
	}
	r.secrets[sv.CommandID] = sv
}

// takeSecrets returns and forgets the values kept for command id.
func (r *Runner) takeSecrets(id string) (prpwire.SecretValues, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sv, ok := r.secrets[id]
	delete(r.secrets, id)
	return sv, ok
}
