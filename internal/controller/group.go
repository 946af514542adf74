package controller

import (
	"context"
	"errors"
	"sync"
)

// maxGroup is the most connections' batches one group commit stores.
const maxGroup = 256

// groupCommitters is how many group commits may run at once.
const groupCommitters = 2

// errControllerClosed is a group commit refused after Close.
var errControllerClosed = errors.New("controller: closed")

// groupCommitter stores the intake batches of all connections through a
// GroupIntaker: each committer takes every batch queued while it last
// committed (at most maxGroup) and stores them in one PutIntake. A
// failed group is stored again batch by batch, so that one connection's
// failure is its own.
type groupCommitter struct {
	gi     GroupIntaker
	reqs   chan *groupReq
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// done is closed once every committer returned: a batch queued
	// after that is answered by no one.
	done chan struct{}
}

type groupReq struct {
	b   IntakeBatch
	err chan error
}

func newGroupCommitter(gi GroupIntaker) *groupCommitter {
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupCommitter{gi: gi, reqs: make(chan *groupReq, maxGroup), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	for range groupCommitters {
		g.wg.Go(g.run)
	}
	go func() {
		g.wg.Wait()
		close(g.done)
	}()
	return g
}

// put stores b in a group commit and returns once it is durable. ctx
// bounds only the wait for a place in the queue: once b is queued, put
// returns the committer's answer, whatever ctx does. A committer commits
// every batch it took, so a put that returned ctx.Err() for a batch it
// had queued would report as not stored a batch that is stored a moment
// later; the connection's runner, welcomed again from what the store
// holds, would then never send that batch's events again, and nothing
// would complete their results' commands (the lost tasks of the reconnect
// storm, issue 55). The wait is bounded by the group commits queued
// before b's (close answers the batches no committer took).
func (g *groupCommitter) put(ctx context.Context, b IntakeBatch) error {
	r := &groupReq{b: b, err: make(chan error, 1)}
	select {
	case g.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.ctx.Done():
		return errControllerClosed
	}
	select {
	case err := <-r.err:
		return err
	case <-g.done:
		select {
		case err := <-r.err:
			return err
		default:
			return errControllerClosed
		}
	}
}

func (g *groupCommitter) run() {
	for {
		var first *groupReq
		select {
		case first = <-g.reqs:
		case <-g.ctx.Done():
			for {
				select {
				case r := <-g.reqs:
					r.err <- errControllerClosed
				default:
					return
				}
			}
		}
		group := []*groupReq{first}
	more:
		for len(group) < maxGroup {
			select {
			case r := <-g.reqs:
				group = append(group, r)
			default:
				break more
			}
		}
		bs := make([]IntakeBatch, len(group))
		for i, r := range group {
			bs[i] = r.b
		}
		err := g.gi.PutIntake(g.ctx, bs)
		if err != nil && len(group) > 1 {
			for _, r := range group {
				r.err <- g.gi.PutIntake(g.ctx, []IntakeBatch{r.b})
			}
			continue
		}
		for _, r := range group {
			r.err <- err
		}
	}
}

// close stops the committers; a batch not committed yet fails.
func (g *groupCommitter) close() {
	g.cancel()
	<-g.done
}
