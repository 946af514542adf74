package controller

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease"
)

// runTask is the lease manager's RunTask (lease.Handle.Run): it connects
// the runner of h's lease for p (Attach, once per lease in this process:
// later Runs reuse the session, each authorized for its own principal when
// it starts a task) and starts cmd on it (Attachment.Start: secrets
// checked, the start journaled, a TaskID that ran before returns that
// task).
func (c *Controller) runTask(ctx context.Context, p authz.Principal, h *lease.Handle, cmd lease.Command) (*runTask, error) {
	var stdin []byte
	if cmd.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(cmd.Stdin, leasehook.MaxRunStdin+1))
		if err != nil {
			return nil, fmt.Errorf("controller: run on lease %s: read the task's stdin: %w", h.ID(), err)
		}
		if len(b) > leasehook.MaxRunStdin {
			return nil, fmt.Errorf("controller: run on lease %s: the task's stdin is over %d bytes: %w", h.ID(), leasehook.MaxRunStdin, errcode.ErrInvalid)
		}
		stdin = b
	}
	a, err := c.runAttachment(ctx, p, h)
	if err != nil {
		return nil, err
	}
	t, err := a.Start(ctx, p, TaskSpec{TaskStart: prp.TaskStart{TaskID: cmd.TaskID, Argv: cmd.Argv, Env: cmd.Env, Cwd: cmd.Dir,
		Deadline: cmd.Deadline, OutputLimit: cmd.OutputLimit, Stdin: stdin, Secrets: SecretUses(cmd.Secrets)}, StopGrace: cmd.StopGrace})
	if err != nil {
		return nil, err
	}
	return &runTask{t}, nil
}

// reattachTask is the lease manager's ReattachTask (lease.Handle.Reattach):
// it connects the runner of h's lease for p as runTask does (Attach: a
// runner that is not connected is relaunched with a resume ticket of the
// lease's own session) and returns the handle of task id on that session.
// p's right to the session is checked by each call of the task, as for
// every session call.
func (c *Controller) reattachTask(ctx context.Context, p authz.Principal, h *lease.Handle, id string) (*runTask, error) {
	a, err := c.runAttachment(ctx, p, h)
	if err != nil {
		return nil, err
	}
	return &runTask{a.Task(id, "")}, nil
}

// findTask is the lease manager's FindTask (lease.Manager.Task): the
// handle of task id on the lease's own runner session (the latest one the
// holder's Attach made for a task run of the lease's company), for p,
// without attaching anything: whoever holds the lease serves its runner.
// A lease without such a session is an error wrapping
// errcode.ErrNotFound.
func (c *Controller) findTask(ctx context.Context, p authz.Principal, leaseID, id string) (*runTask, error) {
	l, err := c.leases.GetLease(ctx, leaseID)
	if err != nil {
		return nil, fmt.Errorf("controller: task %s of lease %s: %w", id, leaseID, err)
	}
	ss, err := c.o.Store.LeaseSessions(ctx, leaseID)
	if err != nil {
		return nil, fmt.Errorf("controller: task %s of lease %s: %w", id, leaseID, err)
	}
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		if !s.Holder || s.Scope != prp.ScopeTask || s.Company != l.Company {
			continue
		}
		a, err := c.Reattach(ctx, p, s.ID)
		if err != nil {
			return nil, err
		}
		return &runTask{a.Task(id, "")}, nil
	}
	return nil, fmt.Errorf("controller: task %s of lease %s: the lease has no runner session yet: %w", id, leaseID, errcode.ErrNotFound)
}

// SecretUses returns uses as the runner protocol's secret references.
func SecretUses(uses []lease.SecretUse) []prp.SecretUse {
	if uses == nil {
		return nil
	}
	out := make([]prp.SecretUse, len(uses))
	for i, u := range uses {
		out[i] = prp.SecretUse{Source: prp.SecretSource(u.Source), Ref: u.Ref, Env: u.Env, File: u.File, Projects: u.Projects}
	}
	return out
}

// runAttachment returns the attachment of h's lease that Run uses in this
// process, acting for p: the first Run of the lease attaches its runner
// (concurrent ones wait for it), the others copy it for their principal.
// The lease manager's LeaseEnded forgets it.
func (c *Controller) runAttachment(ctx context.Context, p authz.Principal, h *lease.Handle) (*Attachment, error) {
	id := h.ID()
	for {
		c.mu.Lock()
		if a := c.runs[id]; a != nil {
			c.mu.Unlock()
			cp := *a
			cp.p = p
			return &cp, nil
		}
		lock := c.runLocks[id]
		if lock == nil {
			lock = make(chan struct{})
			c.runLocks[id] = lock
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		select {
		case <-lock:
		case <-ctx.Done():
			return nil, fmt.Errorf("controller: run on lease %s: waiting for its runner: %w", id, ctx.Err())
		}
	}
	defer func() {
		c.mu.Lock()
		close(c.runLocks[id])
		delete(c.runLocks, id)
		c.mu.Unlock()
	}()
	// The lease's runner session, if it has one (a process before this
	// one attached it): its run, so that Attach takes that session on
	// (its runner reconnects, or is relaunched with a resume ticket)
	// instead of making a session of a new run.
	var req AttachRequest
	ss, err := c.o.Store.LeaseSessions(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("controller: run on lease %s: %w", id, err)
	}
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		if !s.Holder || s.Scope != prp.ScopeTask || s.Company == authz.InstanceCompany || strings.HasPrefix(s.Run, prp.PoolRunPrefix) {
			continue
		}
		req.Run = s.Run
		// A runner a host's own Attach connected in this process: Run
		// uses its session (a second Attach would find the lease
		// attached).
		c.mu.Lock()
		at, live := c.attached[id], c.live[s.ID] != nil
		c.mu.Unlock()
		if at != nil && !at.pool && live {
			a, err := c.Reattach(ctx, p, s.ID)
			if err != nil {
				return nil, err
			}
			c.mu.Lock()
			c.runs[id] = a
			c.mu.Unlock()
			return a, nil
		}
		break
	}
	a, err := c.Attach(ctx, p, h, req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.runs[id] = a
	c.mu.Unlock()
	return a, nil
}

// runTask is the task of lease.Handle.Run: a Task with the methods
// lease.Task calls.
type runTask struct{ t *Task }

func (r *runTask) ID() string { return r.t.ID() }

func (r *runTask) Wait(ctx context.Context) (lease.Exit, error) {
	e, err := r.t.Wait(ctx)
	return lease.Exit(e), err
}

func (r *runTask) Output(ctx context.Context, after uint64) ([]lease.OutputChunk, error) {
	cs, err := r.t.Output(ctx, after)
	out := make([]lease.OutputChunk, len(cs))
	for i, ch := range cs {
		out[i] = lease.OutputChunk{Seq: ch.Seq, Stream: string(ch.Stream), Offset: ch.Offset, Data: ch.Data, Truncated: ch.Truncated}
	}
	return out, err
}

func (r *runTask) Stop(ctx context.Context) (lease.StopProof, error) {
	pr, err := r.t.Stop(ctx)
	return lease.StopProof(pr.StopProof), err
}
