package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/berthdev/berth/internal/prpwire"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/prp"
)

// EventEventsLost is the kind of the event record the controller stores
// when a runner's resume cursor shows events that the controller never
// stored and the runner no longer has (PRP-5). It is stored under the
// last lost seq (To of the range); the seqs from From up to To-1 stay
// unstored, so it is the only gap in a session's stored events, and it
// carries a Result with Code prpwire.CodeEventsLost whose Message names the range.
const EventEventsLost prp.EventKind = "events_lost"

// lostRange is a range of event seqs, both ends included, that a runner
// lost before the controller stored them.
type lostRange struct {
	From, To uint64
}

// eventsLost authorizes p on session and returns the ranges of event seqs
// its runner lost before the controller stored them, in seq order (none:
// nothing was lost).
func (c *Controller) eventsLost(ctx context.Context, p authz.Principal, session string) ([]lostRange, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return nil, err
	}
	evs, err := c.o.Store.EventsAfter(ctx, s.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	var out []lostRange
	var prev uint64
	for _, e := range evs {
		if e.Event.Kind == EventEventsLost {
			out = append(out, lostRange{From: prev + 1, To: e.Seq})
		}
		prev = e.Seq
	}
	return out, nil
}

// lostEvents checks a hello's resume cursor against ack, the highest seq
// stored for sess: events from ack+1 up to the runner's oldest unacked
// event (or its next seq, with an empty outbox) are events the runner no
// longer has and the controller never stored. It records them as an
// EventEventsLost record under the last lost seq, fails every command the
// runner received whose result is not stored (prpwire.CodeEventsLost), and returns
// the new cumulative ack; with nothing lost it returns ack.
func (c *Controller) lostEvents(ctx context.Context, sess Session, h prpwire.Hello, ack uint64) (uint64, error) {
	r := h.Resume
	has := r.NextEventSeq // the lowest seq the runner still has or will send
	if r.OldestUnackedEvent > 0 {
		has = r.OldestUnackedEvent
	}
	if has <= ack+1 {
		return ack, nil
	}
	lost := lostRange{From: ack + 1, To: has - 1}
	msg := fmt.Sprintf("events %d to %d of session %s were lost on the runner's disk before the controller stored them", lost.From, lost.To, sess.ID)
	c.log.Error("controller: events lost; failing the session's commands", "session", sess.ID, "from", lost.From, "to", lost.To)
	now := time.Now().UTC()
	rec := EventRecord{Session: sess.ID, Seq: lost.To, StoredAt: now, Event: prp.Event{Kind: EventEventsLost,
		Result: &prp.Result{Status: prp.ResultIndeterminate, Code: prpwire.CodeEventsLost, Message: msg}}}
	if _, err := c.o.Store.PutEvent(ctx, rec); err != nil {
		return ack, err
	}
	cmds, err := c.o.Store.CommandsAfter(ctx, sess.ID, 0, 0)
	if err != nil {
		return ack, err
	}
	for _, cr := range cmds {
		if cr.Seq > r.LastCommandSeq || cr.State.Terminal() {
			continue
		}
		res := prp.Result{CommandID: cr.Command.ID, Status: prp.ResultIndeterminate, Code: prpwire.CodeEventsLost, Message: msg}
		if _, err := c.o.Store.CompleteCommand(ctx, sess.ID, res, now); err != nil {
			return ack, err
		}
	}
	c.notify(sess.ID)
	return lost.To, nil
}
