package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// ErrTaskNotRun is wrapped by Task.Wait when the runner did not run the
// task (its start was rejected or is indeterminate: nothing ran, or what
// ran is unknown after a runner crash); the error names the status and
// the runner's code.
var ErrTaskNotRun = errcode.New(errcode.Conflict, "controller: the runner did not run the task")

// ErrEventsLost is wrapped by Task.Wait and Task.Output when the runner
// lost events of the session before the controller stored them
// (EventEventsLost): what the task printed or how it ended may be missing.
var ErrEventsLost = errcode.New(errcode.Internal, "controller: events of the session were lost")

// TaskSpec is a task to start on an attached runner (Attachment.Start).
type TaskSpec struct {
	// TaskStart is the task: argv, env, working directory, deadline,
	// output limit, stdin and secret references. TaskID "" means a new
	// id (prp.NewID("task")).
	prp.TaskStart
	// CommandID is the task.start command's id. Default: derived from
	// TaskID ("start_" and the id), so that starting the same TaskID again
	// (a retry after an error or a crash of the host) returns the
	// journaled command and runs nothing twice. A caller may set its own
	// for retries; the same id with another body is
	// ErrIdempotencyConflict.
	CommandID string
	// Stdout and Stderr, if not nil, get the task's output as it is
	// stored, byte for byte and in order, while Wait runs (Wait returns
	// once all of it is written). Nil: the output is stored only (read it
	// with Task.Output).
	Stdout, Stderr io.Writer
	// Started, if not nil, is called by Wait once, when the runner reports
	// the task started, with its process id in the sandbox.
	Started func(pid int)
	// StopGrace is how long Task.Stop lets the task's processes exit
	// after SIGTERM before the runner sends SIGKILL. Default
	// leaseStopGrace.
	StopGrace time.Duration
}

// Start starts spec's task on the attached runner for p: it authorizes p
// on the session (as every session call: a session p may not read is
// errcode.ErrNotFound, one it may read but not act on errcode.ErrDenied), checks
// the task's secrets with p (Options.Secrets; a refusal is a SecretError
// and journals nothing) and journals the task.start command, which the
// runner gets on its connection, now or when it reconnects (PRP-4). A
// probe attachment runs no task (prp.ErrScopeDenied). A command id used
// before returns the handle of that task and starts nothing again. The
// returned Task acts with p's authority: its methods take no principal.
func (a *Attachment) Start(ctx context.Context, p authz.Principal, spec TaskSpec) (*Task, error) {
	ts := spec.TaskStart
	if ts.TaskID == "" {
		id, err := prp.NewID("task")
		if err != nil {
			return nil, err
		}
		ts.TaskID = id
	}
	cmdID := cmp.Or(spec.CommandID, taskCommandID("start", ts.TaskID))
	// CFG-9: no new task while the instance settings disable environments.
	if err := a.c.admit(ctx, "", false); err != nil {
		return nil, fmt.Errorf("controller: start task %s on lease %s: %w", ts.TaskID, a.lease, err)
	}
	if _, err := a.c.dispatch(ctx, p, a.session, prp.Command{ID: cmdID, Kind: prp.CommandTaskStart, Lease: a.lease, Run: a.run, TaskStart: &ts}); err != nil {
		return nil, err
	}
	return &Task{c: a.c, p: p, session: a.session, lease: a.lease, run: a.run, id: ts.TaskID, cmd: cmdID,
		stdout: spec.Stdout, stderr: spec.Stderr, started: spec.Started, grace: spec.StopGrace,
		waitLock: make(chan struct{}, 1)}, nil
}

// Task is a handle of one task started on an attached runner
// (Attachment.Start, Attachment.Task). Its methods take no principal: the
// handle carries the authority of the principal it was made for, as an
// os.File carries the access granted when it was opened, and each call
// acts as that principal. It is safe for concurrent use.
type Task struct {
	c                   *Controller
	p                   authz.Principal
	session, lease, run string
	id, cmd             string
	stdout, stderr      io.Writer
	started             func(pid int)
	grace               time.Duration

	// waitLock serializes Wait; seq is the last event Wait handled,
	// startedSeen whether Started was called.
	waitLock    chan struct{}
	seq         uint64
	startedSeen bool
}

// ID returns the task's id.
func (t *Task) ID() string { return t.id }

// Wait waits until the task ended and returns how (prp.Exit: the code, or
// -1 and the signal). While it runs it writes the task's stored output to
// TaskSpec.Stdout and Stderr, in order, and it returns only after the last
// byte before the exit is written; called again after it returned early
// (ctx ended: ctx.Err() wrapped), it goes on where it stopped, so nothing
// is written twice or skipped. Calls run one at a time. A task the runner
// did not run is an error wrapping ErrTaskNotRun; lost events are
// ErrEventsLost; a writer's error is returned as it is.
func (t *Task) Wait(ctx context.Context) (prp.Exit, error) {
	select {
	case t.waitLock <- struct{}{}:
	case <-ctx.Done():
		return prp.Exit{}, fmt.Errorf("controller: wait for task %s: %w", t.id, ctx.Err())
	}
	defer func() { <-t.waitLock }()
	if t.stdout == nil && t.stderr == nil && t.started == nil {
		return t.waitResult(ctx)
	}
	var exit *prp.Exit
	errDone := errors.New("done")
	// Only this task's output to a writer it has is read back.
	bytes := func(r EventRecord) bool {
		o := r.Event.Output
		return r.Event.TaskID == t.id && o != nil && ((o.Stream == prp.Stderr && t.stderr != nil) || (o.Stream != prp.Stderr && t.stdout != nil))
	}
	err := t.c.follow(ctx, t.p, t.session, t.seq, bytes, func(se StoredEvent) error {
		ev := se.Event
		switch {
		case ev.Kind == prp.EventOutput && ev.TaskID == t.id:
			w := t.stdout
			if ev.Output.Stream == prp.Stderr {
				w = t.stderr
			}
			if w != nil {
				if _, err := w.Write(ev.Output.Data); err != nil {
					return err
				}
			}
		case ev.Kind == prp.EventStarted && ev.TaskID == t.id && !t.startedSeen:
			t.startedSeen = true
			if t.started != nil {
				t.started(ev.PID)
			}
		case ev.Kind == prp.EventExit && ev.TaskID == t.id && ev.Exit != nil:
			exit = ev.Exit
			t.seq = se.Seq
			return errDone
		case ev.Kind == prp.EventResult && ev.Result != nil && ev.Result.CommandID == t.cmd && ev.Result.Exit == nil &&
			ev.Result.Status != prp.ResultDone:
			t.seq = se.Seq
			return fmt.Errorf("task %s: %w: %s (%s): %s", t.id, ErrTaskNotRun, ev.Result.Status, ev.Result.Code, ev.Result.Message)
		case ev.Kind == EventEventsLost:
			t.seq = se.Seq
			msg := ""
			if ev.Result != nil {
				msg = ev.Result.Message
			}
			return fmt.Errorf("task %s: %w: %s", t.id, ErrEventsLost, msg)
		}
		t.seq = se.Seq
		return nil
	})
	if errors.Is(err, errDone) {
		return *exit, nil
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return prp.Exit{}, fmt.Errorf("controller: wait for task %s: %w", t.id, err)
	}
	return prp.Exit{}, err
}

// waitResult is Wait for a task with nothing to write or report while it
// runs: it waits for its task.start command's result (which carries the
// exit, truncated as the output was) instead of reading every event of
// the session back (the followers of a thousand streams read the store
// as often as the intake wrote it, issue 55).
func (t *Task) waitResult(ctx context.Context) (prp.Exit, error) {
	res, err := t.c.wait(ctx, t.p, t.session, t.cmd)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return prp.Exit{}, fmt.Errorf("controller: wait for task %s: %w", t.id, ctx.Err())
	case err != nil:
		return prp.Exit{}, err
	case res.Status == prp.ResultDone && res.Exit != nil:
		return *res.Exit, nil
	case res.Code == prpwire.CodeEventsLost:
		return prp.Exit{}, fmt.Errorf("task %s: %w: %s", t.id, ErrEventsLost, res.Message)
	}
	return prp.Exit{}, fmt.Errorf("task %s: %w: %s (%s): %s", t.id, ErrTaskNotRun, res.Status, res.Code, res.Message)
}

// OutputChunk is a piece of a task's stored output (Task.Output).
type OutputChunk struct {
	// Seq is the event's seq in the session: pass the last chunk's Seq to
	// the next Output call.
	Seq    uint64
	Stream prp.Stream
	// Offset is where Data starts in Stream.
	Offset int64
	Data   []byte
	// Truncated counts bytes of the chunk discarded past an output limit.
	Truncated int64
}

// maxOutputChunks bounds the chunks one Output call returns.
const maxOutputChunks = 256

// Output returns the task's output chunks (both streams, in the order they
// were stored) whose event seq is after from (0: from the start), at most
// 256 of them; it waits until there is at least one. Once the task ended
// and every chunk after from was returned it returns io.EOF. A follower
// that reconnects passes the Seq of the last chunk it got and misses
// nothing. ctx bounds the wait. Lost events are ErrEventsLost.
func (t *Task) Output(ctx context.Context, from uint64) ([]OutputChunk, error) {
	var out []OutputChunk
	ended, lost := false, false
	for {
		ch := t.c.sessionChanges(t.session)
		recs, err := t.c.eventsAfter(ctx, t.p, t.session, from, maxOutputChunks)
		if err != nil {
			return nil, err
		}
		for _, se := range recs {
			ev := se.Event
			switch {
			case ev.Kind == prp.EventOutput && ev.TaskID == t.id:
				out = append(out, OutputChunk{Seq: se.Seq, Stream: ev.Output.Stream, Offset: ev.Output.Offset, Data: ev.Output.Data, Truncated: ev.Output.Truncated})
			case ev.Kind == prp.EventExit && ev.TaskID == t.id,
				ev.Kind == prp.EventResult && ev.Result != nil && ev.Result.CommandID == t.cmd && ev.Result.Exit == nil && ev.Result.Status != prp.ResultDone:
				ended = true
			case ev.Kind == EventEventsLost:
				if len(out) == 0 {
					return nil, fmt.Errorf("task %s: %w", t.id, ErrEventsLost)
				}
				// Return the chunks before the loss: the next call,
				// from the last of them, reports it.
				lost = true
			}
			if ended || lost {
				break
			}
			from = se.Seq
		}
		switch {
		case len(out) > 0 || lost:
			return out, nil
		case ended:
			return nil, io.EOF
		case len(recs) == maxOutputChunks:
			continue
		}
		if err := t.c.await(ctx, ch); err != nil {
			return nil, fmt.Errorf("controller: output of task %s: %w", t.id, err)
		}
	}
}

// Stop stops the task's whole process tree (task.stop: SIGTERM,
// TaskSpec.StopGrace, SIGKILL) and returns the runner's proof, with
// Evidence drivers.EvidenceRunnerAttested: the runner's word, which never
// ends a lease alone (releasing the lease proves from outside). A proof
// counts only if it is complete, names no survivor and no failed check,
// and both the group check and the tag scan ran; otherwise Stop returns
// it with an error wrapping ErrProofIncomplete. The stop command's id is
// derived from the task's, so calling Stop again returns the same proof.
// ctx bounds the wait for the runner.
func (t *Task) Stop(ctx context.Context) (Proof, error) {
	grace := t.grace
	if grace <= 0 {
		grace = leaseStopGrace
	}
	id := taskCommandID("stop", t.id)
	if _, err := t.c.dispatch(ctx, t.p, t.session, prp.Command{ID: id, Kind: prp.CommandTaskStop, Lease: t.lease, Run: t.run,
		TaskStop: &prp.TaskStop{TaskID: t.id, Grace: grace}}); err != nil {
		return Proof{}, err
	}
	res, err := t.c.wait(ctx, t.p, t.session, id)
	if err != nil {
		return Proof{}, err
	}
	if res.Proof == nil {
		return Proof{}, fmt.Errorf("controller: stop of task %s: %w: stop %s (%s): no proof", t.id, ErrProofIncomplete, res.Status, res.Code)
	}
	pr := Proof{StopProof: *res.Proof, Evidence: drivers.EvidenceRunnerAttested}
	if !verified(*res.Proof) {
		return pr, fmt.Errorf("controller: stop of task %s: %w: survivors %v, checks that could not run %v", t.id, ErrProofIncomplete, res.Proof.Survivors, res.Proof.Failed)
	}
	return pr, nil
}

// Task returns the handle of task id on the attachment's session, for a
// host that lost its handle (a restart, a follower that reconnects): it
// acts with the authority of the attachment's principal (the one given to
// Attach or Reattach); the start's command id is the default derived from
// id (TaskSpec.CommandID) unless cmdID names another, and the handle has
// no writers (read the output with Task.Output). It reads nothing: an
// unknown task shows in Wait and Output as one that never ends.
func (a *Attachment) Task(id, cmdID string) *Task {
	cmdID = cmp.Or(cmdID, taskCommandID("start", id))
	return &Task{c: a.c, p: a.p, session: a.session, lease: a.lease, run: a.run, id: id, cmd: cmdID, waitLock: make(chan struct{}, 1)}
}

// taskCommandID is the id of the kind ("start", "stop") command of task id
// that the library derives, so that the same call for the same task
// returns the journaled command instead of running it again.
func taskCommandID(kind, id string) string {
	return kind + "_" + strings.TrimPrefix(id, "task_")
}
