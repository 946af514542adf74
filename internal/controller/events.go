package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
)

// Default intake caps (Options.MaxSessionOutput, Options.MaxSessionEvents).
const (
	defaultMaxSessionOutput = 1 << 30
	defaultMaxSessionEvents = 1_000_000
)

// intakeItem is one event the reader decided on: its record, whether it is
// stored (keep) or acked and discarded, and the accounting after it.
type intakeItem struct {
	rec   EventRecord
	keep  bool
	total OutputUsage
	task  *TaskUsage // the event's task's usage after it, if it changed
}

// accounting is the intake's bookkeeping on one connection (issue 22
// item 4): the session's totals and its started tasks' usage, loaded from
// the store when the connection starts and stored after every batch, so
// that the caps hold across reconnects and replicas.
type accounting struct {
	c     *Controller
	sess  Session
	total OutputUsage
	tasks map[string]*taskAccount
	// journal is the last command seq read into starts; starts maps the
	// task.start commands of the session by task id, byCmd their ids.
	// sent is the connection's sentSeq, and readAt its value at the last
	// read of the journal (read: there was one).
	journal uint64
	sent    func() uint64
	readAt  uint64
	read    bool
	starts  map[string]prp.TaskStart
	byCmd   map[string]string
	warned  bool
}

type taskAccount struct {
	limit int64
	usage OutputUsage
}

// newAccounting loads sess's totals: as stored, plus the events stored
// after them (a crash between the writes of a batch). Those events' batch
// may also have missed its results: their commands are completed now (see
// intake), before the connection reads an event.
func (c *Controller) newAccounting(ctx context.Context, sess Session, sent func() uint64) (*accounting, error) {
	a := &accounting{c: c, sess: sess, sent: sent, tasks: map[string]*taskAccount{}, starts: map[string]prp.TaskStart{}, byCmd: map[string]string{}}
	u, err := c.o.Store.OutputUsage(ctx, sess.ID, "")
	if err != nil {
		return nil, err
	}
	stored := u
	for {
		recs, err := c.o.Store.EventsAfter(ctx, sess.ID, u.Seq, 1024)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			u.Seq, u.Events = r.Seq, u.Events+1
			if r.Ref != nil {
				u.Bytes += r.Ref.Length
			}
			if err := c.completeResult(ctx, sess.ID, r); err != nil {
				return nil, err
			}
		}
		if len(recs) < 1024 {
			break
		}
	}
	if u.Seq > stored.Seq {
		c.notifySession(sess.ID) // results completed
	}
	a.total = u
	return a, nil
}

// journalReadBatch is how many commands started reads from the journal at
// a time.
const journalReadBatch = 256

// started returns the task.start of task in the session's journal, reading
// the commands journaled since the last look, but only when the runner may
// have got a command since (its connection's sentSeq grew): a task the
// runner was never sent cannot be started, and a hostile runner's events
// of made-up tasks make no store read.
func (a *accounting) started(ctx context.Context, task string) (prp.TaskStart, bool, error) {
	if ts, ok := a.starts[task]; ok {
		return ts, true, nil
	}
	sent := a.sent()
	if a.read && sent <= a.readAt {
		return prp.TaskStart{}, false, nil
	}
	a.read, a.readAt = true, sent
	for {
		cmds, err := a.c.o.Store.CommandsAfter(ctx, a.sess.ID, a.journal, journalReadBatch)
		if err != nil {
			return prp.TaskStart{}, false, err
		}
		for _, r := range cmds {
			a.journal = r.Seq
			if ts := r.Command.TaskStart; ts != nil && r.Command.Kind == prp.CommandTaskStart {
				if _, dup := a.starts[ts.TaskID]; !dup {
					a.starts[ts.TaskID], a.byCmd[r.Command.ID] = *ts, ts.TaskID
				}
			}
		}
		if len(cmds) < journalReadBatch {
			break
		}
	}
	ts, ok := a.starts[task]
	return ts, ok, nil
}

// task returns the account of a started task, loading its usage.
func (a *accounting) task(ctx context.Context, id string, ts prp.TaskStart) (*taskAccount, error) {
	if t := a.tasks[id]; t != nil {
		return t, nil
	}
	u, err := a.c.o.Store.OutputUsage(ctx, a.sess.ID, id)
	if err != nil {
		return nil, err
	}
	t := &taskAccount{limit: ts.OutputLimit, usage: u}
	a.tasks[id] = t
	return t, nil
}

// decide accounts event seq of the session and returns what the intake does
// with it: output bytes are stored only for a task started in this session
// (its task.start journaled here), up to the task's output limit and the
// session's byte cap; events only up to the session's event cap, and none
// on a probe session. A discarded event is acked all the same. A kept
// output event's bytes are written to the sink (not synced: the writer
// syncs before it acks).
func (a *accounting) decide(ctx context.Context, seq uint64, ev prp.Event, now time.Time) (intakeItem, error) {
	c := a.c
	a.total.Seq = seq
	it := intakeItem{rec: EventRecord{Session: a.sess.ID, Seq: seq, Event: ev, StoredAt: now}}
	var data []byte
	if ev.Kind == prp.EventOutput {
		data = ev.Output.Data
	}
	discard := func(why string) (intakeItem, error) {
		a.total.Discarded++
		a.total.Truncated += int64(len(data))
		if !a.warned {
			a.warned = true
			c.log.Warn("controller: runner events discarded", "session", a.sess.ID, "kind", ev.Kind, "task", ev.TaskID, "why", why)
		}
		it.total = a.total
		return it, nil
	}
	probe := a.sess.Scope != prp.ScopeTask
	if probe && ev.Kind != prp.EventResult {
		return discard("a probe session has no tasks")
	}
	if ev.Kind == prp.EventResult {
		if probe || a.total.Events >= c.o.MaxSessionEvents {
			// Past the cap, and on a probe session (whose runner refuses
			// a command a broken journal holds), only a result a command
			// still waits for.
			r, err := c.o.Store.GetCommand(ctx, a.sess.ID, ev.Result.CommandID)
			if errors.Is(err, errcode.ErrNotFound) || (err == nil && r.State.Terminal()) {
				return discard("the session's event cap, or a probe session")
			}
			if err != nil {
				return intakeItem{}, err
			}
		}
		if _, _, err := a.started(ctx, ""); err != nil { // read the journal up to now
			return intakeItem{}, err
		}
		if id, ok := a.byCmd[ev.Result.CommandID]; ok && ev.Result.Exit != nil {
			if t := a.tasks[id]; t != nil && t.usage.Truncated > 0 {
				res, exit := *ev.Result, *ev.Result.Exit
				exit.Truncated, res.Exit = true, &exit
				it.rec.Event.Result = &res
			}
		}
		return a.keep(it), nil
	}
	ts, ok, err := a.started(ctx, ev.TaskID)
	if err != nil {
		return intakeItem{}, err
	}
	if !ok {
		return discard("no task.start of the task in this session")
	}
	if a.total.Events >= c.o.MaxSessionEvents {
		return discard("the session's event cap")
	}
	t, err := a.task(ctx, ev.TaskID, ts)
	if err != nil {
		return intakeItem{}, err
	}
	switch ev.Kind {
	case prp.EventOutput:
		room := c.o.MaxSessionOutput - a.total.Bytes
		if t.limit > 0 {
			room = min(room, t.limit-t.usage.Bytes)
		}
		n := int64(len(data))
		k := max(min(n, room), 0)
		cut := n - k
		t.usage.Seq, t.usage.Truncated, a.total.Truncated = seq, t.usage.Truncated+cut, a.total.Truncated+cut
		it.task = &TaskUsage{Task: ev.TaskID}
		if k == 0 {
			a.total.Discarded++
			it.total, it.task.Usage = a.total, t.usage
			return it, nil
		}
		ref, err := c.sink.WriteOutput(ctx, a.sess.ID, seq, data[:k])
		if err != nil {
			return intakeItem{}, err
		}
		out := *ev.Output
		out.Data, out.Truncated = nil, cut
		it.rec.Event.Output, it.rec.Ref = &out, &ref
		t.usage.Bytes += k
		a.total.Bytes += k
		it.task.Usage = t.usage
	case prp.EventExit:
		if t.usage.Truncated > 0 && ev.Exit != nil {
			exit := *ev.Exit
			exit.Truncated = true
			it.rec.Event.Exit = &exit
		}
	}
	return a.keep(it), nil
}

// keep counts it as a stored event.
func (a *accounting) keep(it intakeItem) intakeItem {
	a.total.Events++
	it.keep, it.total = true, a.total
	return it
}

// intake stores the metadata of the kept events of items (events of sess
// in seq order, their bytes in the sink) durably (PRP-5): in one PutEvents
// if the store is an EventBatcher, else event by event, idempotent on
// (session, seq); then a command result into the journal (the first result
// wins); then the accounting as of the last item, which also acks the
// discarded ones. With a GroupIntaker store the events, their results and
// the accounting go in one group commit with other connections' batches.
//
// A runner is welcomed back from the last event the store holds and never
// sends a stored event again, so every write after the events' must be
// done even if the connection ends (issue 55: the result of a task whose
// connection dropped between the two writes was never completed, and
// its Wait never returned): the results and the accounting are written
// without ctx's cancellation once the events are, and the accounting
// goes last, so that the events a crash left after it (the only ones
// whose results may be missing) are those newAccounting completes.
func (c *Controller) intake(ctx context.Context, sess Session, items []intakeItem) error {
	recs := make([]EventRecord, 0, len(items))
	for _, it := range items {
		if it.keep {
			recs = append(recs, it.rec)
		}
	}
	// The usage after the last item: the session's totals, then each
	// task's last.
	var us []TaskUsage
	if len(items) > 0 {
		us = []TaskUsage{{Usage: items[len(items)-1].total}}
		seen := map[string]int{}
		for _, it := range items {
			if it.task == nil {
				continue
			}
			if i, ok := seen[it.task.Task]; ok {
				us[i] = *it.task
				continue
			}
			seen[it.task.Task] = len(us)
			us = append(us, *it.task)
		}
	}
	if c.group != nil {
		// Events, results and usage in one group commit with other
		// connections'; put returns the commit's answer once the batch
		// is queued, even if ctx ends.
		if err := c.group.put(ctx, IntakeBatch{Session: sess.ID, Events: recs, Usage: us}); err != nil {
			return err
		}
		c.notifySession(sess.ID)
		return nil
	}
	if b, ok := c.o.Store.(EventBatcher); ok && len(recs) > 0 {
		if err := b.PutEvents(ctx, recs); err != nil {
			return err
		}
	} else {
		for _, r := range recs {
			if _, err := c.o.Store.PutEvent(ctx, r); err != nil {
				return err
			}
		}
	}
	// The events are stored: what follows is done even if the connection
	// ends now.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.limits.DeadAfter)
	defer cancel()
	for _, r := range recs {
		// Always, even for an event stored before: a crash may have come
		// between the two writes.
		if err := c.completeResult(wctx, sess.ID, r); err != nil {
			return err
		}
	}
	if len(us) > 0 {
		if err := c.o.Store.PutOutputUsage(wctx, sess.ID, us); err != nil {
			return err
		}
	}
	c.notifySession(sess.ID)
	return nil
}

// completeResult completes the command of r, if r is a result event, with
// its result (the first result wins; a command not journaled is no error).
func (c *Controller) completeResult(ctx context.Context, session string, r EventRecord) error {
	if r.Event.Kind != prp.EventResult || r.Event.Result == nil {
		return nil
	}
	if _, err := c.o.Store.CompleteCommand(ctx, session, *r.Event.Result, r.StoredAt); err != nil && !errors.Is(err, errcode.ErrNotFound) {
		return err
	}
	return nil
}

// StoredEvent is an event as stored, with an output event's bytes read
// back from the sink.
type StoredEvent struct {
	Seq      uint64
	Event    prp.Event
	StoredAt time.Time
}

// follow authorizes p on session (authz.ActionLease), then calls fn
// with every stored event of session after seq after, in seq order, each
// once, and keeps following new events until ctx ends (returning
// ctx.Err()) or fn returns an error (returned). It subscribes before it
// backfills and drops what it delivered already, so that no event written
// in between is missed or delivered twice. An output event's bytes are
// read from the sink only if bytes(its record) is true (nil: always);
// otherwise fn gets it with Output.Data nil: a waiter that writes no
// output reads none of it back (a 1 GiB stream read back from disk and
// allocated chunk by chunk halved the runner-stream bench, issue 55).
func (c *Controller) follow(ctx context.Context, p authz.Principal, session string, after uint64, bytes func(EventRecord) bool, fn func(StoredEvent) error) error {
	sess, err := c.session(ctx, p, session)
	if err != nil {
		return err
	}
	if err := notInstanceSession(sess); err != nil {
		return err
	}
	last := after
	for {
		ch := c.sessionChanges(sess.ID)                             // subscribe first ...
		recs, err := c.o.Store.EventsAfter(ctx, sess.ID, last, 256) // ... then backfill
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Seq <= last {
				continue // ... and dedupe
			}
			se := StoredEvent{Seq: r.Seq, Event: r.Event, StoredAt: r.StoredAt}
			if bytes == nil || bytes(r) {
				if se, err = c.load(ctx, r); err != nil {
					return err
				}
			}
			if err := fn(se); err != nil {
				return err
			}
			last = r.Seq
		}
		if len(recs) == 256 {
			continue
		}
		if err := c.await(ctx, ch); err != nil {
			return err
		}
	}
}

// eventsAfter authorizes p on session and returns at most limit of its
// stored events after seq after, output bytes loaded; it does not wait.
func (c *Controller) eventsAfter(ctx context.Context, p authz.Principal, session string, after uint64, limit int) ([]StoredEvent, error) {
	sess, err := c.session(ctx, p, session)
	if err != nil {
		return nil, err
	}
	recs, err := c.o.Store.EventsAfter(ctx, sess.ID, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]StoredEvent, 0, len(recs))
	for _, r := range recs {
		if r.Seq <= after {
			continue
		}
		se, err := c.load(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, se)
	}
	return out, nil
}

// load fills in an output event's bytes.
func (c *Controller) load(ctx context.Context, r EventRecord) (StoredEvent, error) {
	se := StoredEvent{Seq: r.Seq, Event: r.Event, StoredAt: r.StoredAt}
	if r.Event.Kind == prp.EventOutput {
		if r.Ref == nil || r.Event.Output == nil {
			return StoredEvent{}, fmt.Errorf("controller: output event %d of session %s has no output ref", r.Seq, r.Session)
		}
		b, err := c.sink.ReadOutput(ctx, *r.Ref)
		if err != nil {
			return StoredEvent{}, fmt.Errorf("controller: output event %d of session %s: %w", r.Seq, r.Session, err)
		}
		out := *r.Event.Output
		out.Data = b
		se.Event.Output = &out
	}
	return se, nil
}

// ErrOutputGap is returned by Output when the stored chunks of a stream
// are not contiguous.
var ErrOutputGap = errcode.New(errcode.Internal, "controller: output not contiguous")

// maxOutputRead is the most bytes one Output or OutputFrom returns.
const maxOutputRead = 16 << 20

// Output authorizes p on session and returns the stored bytes of stream of
// task from its start, at most maxOutputRead of them (OutputFrom reads on
// from an offset), checking that the chunks are contiguous (ErrOutputGap
// otherwise). It reads what is stored now; it does not wait for more.
func (c *Controller) Output(ctx context.Context, p authz.Principal, session, task string, stream prp.Stream) ([]byte, error) {
	return c.outputFrom(ctx, p, session, task, stream, 0, maxOutputRead)
}

// outputFrom authorizes p on session and returns the stored bytes of
// stream of task from byte offset from on, at most limit of them (limit <=
// 0 or above maxOutputRead: maxOutputRead), checking that the chunks are
// contiguous (ErrOutputGap otherwise). Fewer than limit bytes means that
// is all that is stored now; it does not wait for more. Whether output
// was cut by a limit is in OutputStatus.
func (c *Controller) outputFrom(ctx context.Context, p authz.Principal, session, task string, stream prp.Stream, from int64, limit int) ([]byte, error) {
	sess, err := c.session(ctx, p, session)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > maxOutputRead {
		limit = maxOutputRead
	}
	var out []byte
	var last uint64
	var end int64 // the stream's stored bytes so far
	for {
		recs, err := c.o.Store.EventsAfter(ctx, sess.ID, last, 1024)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			last = r.Seq
			if r.Event.Kind != prp.EventOutput || r.Event.TaskID != task || r.Event.Output.Stream != stream {
				continue
			}
			if r.Event.Output.Offset != end {
				return nil, fmt.Errorf("%w: task %s %s: chunk at offset %d after %d bytes", ErrOutputGap, task, stream, r.Event.Output.Offset, end)
			}
			n := int64(0)
			if r.Ref != nil {
				n = r.Ref.Length
			}
			lo, hi := end, end+n
			end = hi
			if hi <= from {
				continue
			}
			se, err := c.load(ctx, r)
			if err != nil {
				return nil, err
			}
			b := se.Event.Output.Data[max(from-lo, 0):]
			out = append(out, b[:min(len(b), limit-len(out))]...)
			if len(out) == limit {
				return out, nil
			}
		}
		if len(recs) < 1024 {
			return out, nil
		}
	}
}

// outputStatus authorizes p on session and returns the output accounting
// of task (OutputUsage: the bytes stored and the bytes discarded past its
// output limit or the session's cap; task "": the session's totals).
func (c *Controller) outputStatus(ctx context.Context, p authz.Principal, session, task string) (OutputUsage, error) {
	sess, err := c.session(ctx, p, session)
	if err != nil {
		return OutputUsage{}, err
	}
	return c.o.Store.OutputUsage(ctx, sess.ID, task)
}
