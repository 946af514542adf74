package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/prp"
)

// record returns the stored form of event seq of sess, writing an output
// event's bytes to the sink (not synced: the writer syncs before it acks).
func (c *Controller) record(ctx context.Context, sess Session, seq uint64, ev prp.Event, now time.Time) (EventRecord, error) {
	rec := EventRecord{Session: sess.ID, Seq: seq, Event: ev, StoredAt: now}
	if ev.Kind == prp.EventOutput {
		ref, err := c.o.Sink.WriteOutput(ctx, sess.ID, seq, ev.Output.Data)
		if err != nil {
			return EventRecord{}, err
		}
		out := *ev.Output
		out.Data = nil
		rec.Event.Output, rec.Ref = &out, &ref
	}
	return rec, nil
}

// intake stores the metadata of recs (events of sess in seq order, their
// bytes in the sink) durably (PRP-5): in one PutEvents if the store is an
// EventBatcher, else event by event, idempotent on (session, seq); then a
// command result into the journal (the first result wins).
func (c *Controller) intake(ctx context.Context, sess Session, recs []EventRecord) error {
	if b, ok := c.o.Store.(EventBatcher); ok {
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
	for _, r := range recs {
		if r.Event.Kind == prp.EventResult {
			// Always, even for an event stored before: a crash may have
			// come between the two writes.
			if _, err := c.o.Store.CompleteCommand(ctx, sess.ID, *r.Event.Result, r.StoredAt); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
	}
	c.notify()
	return nil
}

// StoredEvent is an event as stored, with an output event's bytes read
// back from the sink.
type StoredEvent struct {
	Seq      uint64
	Event    prp.Event
	StoredAt time.Time
}

// Follow authorizes p on session (environment.ActionLease), then calls fn
// with every stored event of session after seq after, in seq order, each
// once, and keeps following new events until ctx ends (returning
// ctx.Err()) or fn returns an error (returned). It subscribes before it
// backfills and drops what it delivered already, so that no event written
// in between is missed or delivered twice.
func (c *Controller) Follow(ctx context.Context, p environment.Principal, session string, after uint64, fn func(StoredEvent) error) error {
	sess, err := c.session(ctx, p, session)
	if err != nil {
		return err
	}
	last := after
	for {
		ch := c.changes()                                           // subscribe first ...
		recs, err := c.o.Store.EventsAfter(ctx, sess.ID, last, 256) // ... then backfill
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Seq <= last {
				continue // ... and dedupe
			}
			se, err := c.load(ctx, r)
			if err != nil {
				return err
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

// load fills in an output event's bytes.
func (c *Controller) load(ctx context.Context, r EventRecord) (StoredEvent, error) {
	se := StoredEvent{Seq: r.Seq, Event: r.Event, StoredAt: r.StoredAt}
	if r.Event.Kind == prp.EventOutput {
		if r.Ref == nil || r.Event.Output == nil {
			return StoredEvent{}, fmt.Errorf("controller: output event %d of session %s has no output ref", r.Seq, r.Session)
		}
		b, err := c.o.Sink.ReadOutput(ctx, *r.Ref)
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
var ErrOutputGap = errors.New("controller: output not contiguous")

// Output authorizes p on session and returns the stored bytes of stream of
// task, checking that the chunks are contiguous (ErrOutputGap otherwise).
// It reads what is stored now; it does not wait for more.
func (c *Controller) Output(ctx context.Context, p environment.Principal, session, task string, stream prp.Stream) ([]byte, error) {
	sess, err := c.session(ctx, p, session)
	if err != nil {
		return nil, err
	}
	var out []byte
	var last uint64
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
			if r.Event.Output.Offset != int64(len(out)) {
				return nil, fmt.Errorf("%w: task %s %s: chunk at offset %d after %d bytes", ErrOutputGap, task, stream, r.Event.Output.Offset, len(out))
			}
			se, err := c.load(ctx, r)
			if err != nil {
				return nil, err
			}
			out = append(out, se.Event.Output.Data...)
		}
		if len(recs) < 1024 {
			return out, nil
		}
	}
}
