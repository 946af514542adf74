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
}

type groupReq struct {
	b   IntakeBatch
	err chan error
}

func newGroupCommitter(gi GroupIntaker) *groupCommitter {
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupCommitter{gi: gi, reqs: make(chan *groupReq, maxGroup), ctx: ctx, cancel: cancel}
	for range groupCommitters {
		g.wg.Go(g.run)
	}
	return g
}

// put stores b in a group commit and returns once it is durable.
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
	case <-ctx.Done():
		return ctx.Err()
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
	g.wg.Wait()
}
