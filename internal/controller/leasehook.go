package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/lease"
)

// leaseStopGrace is how long StopTasks lets a task's processes exit after
// SIGTERM before the runner sends SIGKILL.
const leaseStopGrace = 5 * time.Second

// taskStopper is the controller's hook for the lease manager, returned by
// New (see there): an unexported type, so that only the composer who built
// the Controller can stop a lease's tasks without a principal.
type taskStopper struct{ c *Controller }

var _ leasehook.TaskStopper = taskStopper{}

// StopTasks implements leasehook.TaskStopper (stopTasks).
func (t taskStopper) StopTasks(ctx context.Context, leaseID string) (leasehook.TaskStopReport, error) {
	return t.c.stopTasks(ctx, leaseID)
}

// LeaseEnded implements leasehook.TaskStopper (leaseEnded).
func (t taskStopper) LeaseEnded(leaseID string) { t.c.leaseEnded(leaseID) }

// RunTask is the lease manager's hook for lease.Handle.Run (runTask,
// run.go): it acts for p, the principal the handle was acquired for.
func (t taskStopper) RunTask(ctx context.Context, p authz.Principal, h *lease.Handle, cmd lease.Command) (any, error) {
	rt, err := t.c.runTask(ctx, p, h, cmd)
	if err != nil {
		return nil, err
	}
	return rt, nil
}

// ReattachTask is the lease manager's hook for lease.Handle.Reattach
// (reattachTask, run.go): it acts for p, the principal the handle was
// acquired or opened for.
func (t taskStopper) ReattachTask(ctx context.Context, p authz.Principal, h *lease.Handle, id string) (any, error) {
	rt, err := t.c.reattachTask(ctx, p, h, id)
	if err != nil {
		return nil, err
	}
	return rt, nil
}

// FindTask is the lease manager's hook for lease.Manager.Task (findTask,
// run.go): it acts for p, whom the manager authorized on the lease.
func (t taskStopper) FindTask(ctx context.Context, p authz.Principal, leaseID, id string) (any, error) {
	rt, err := t.c.findTask(ctx, p, leaseID, id)
	if err != nil {
		return nil, err
	}
	return rt, nil
}

// StartPoolRunner is the lease manager's hook for the members of runner
// pools (startPoolRunner, pool.go).
func (t taskStopper) StartPoolRunner(ctx context.Context, h *lease.Handle) error {
	return t.c.startPoolRunner(ctx, h)
}

// PoolRunnerConnected is the lease manager's hook for the members of
// runner pools another process started (poolRunnerConnected).
func (t taskStopper) PoolRunnerConnected(ctx context.Context, leaseID string) (bool, error) {
	return t.c.poolRunnerConnected(ctx, leaseID)
}

// ReconnectPoolRunner is the lease manager's hook for the members of
// runner pools another process started (reconnectPoolRunner).
func (t taskStopper) ReconnectPoolRunner(ctx context.Context, h *lease.Handle) error {
	return t.c.reconnectPoolRunner(ctx, h)
}

// stopTasks is the lease manager's StopTasks: it stops every task of every
// task session of lease that the holder's Attach created (Session.Holder;
// probe sessions run none, and the tasks of sessions other tickets created
// were not given by the holder: the release never waits on them) and
// checks each stop as Task.Stop does; the report's evidence is
// drivers.EvidenceRunnerAttested, which the lease manager never takes
// alone to end the lease (a proof counts only if complete, with no survivor
// and no failed check, and both the group check and the tag scan ran). A
// task whose stop is already verified in the store (an earlier StopTasks or
// Task.Stop) is not stopped again, so a retry after a partial failure
// asks the runner only for what is left, and a retry after a full success
// needs no runner. The runner may be connected to any replica: commands go
// through the store. A stop the runner does not answer before ctx ends, an
// incomplete proof and a refused stop are errors naming the session and
// task (errors wrapping ErrProofIncomplete for proofs that do not count).
//
// The lease manager calls it after it authorized the release
// (authz.ActionLease) or the sweep (authz.ActionSweep), so it
// asks the Authorizer nothing itself; a host calls Task.Stop, whose handle
// was authorized, to stop a task for a principal.
func (c *Controller) stopTasks(ctx context.Context, leaseID string) (leasehook.TaskStopReport, error) {
	sessions, err := c.o.Store.LeaseSessions(ctx, leaseID)
	if err != nil {
		return leasehook.TaskStopReport{}, fmt.Errorf("controller: stop the tasks of lease %s: %w", leaseID, err)
	}
	rep := leasehook.TaskStopReport{Sessions: len(sessions)}
	var errs []error
	stopped, earlier, foreign := 0, 0, 0
	for _, s := range sessions {
		if s.Scope != prp.ScopeTask || !s.Holder {
			// Probe sessions run no task, and sessions the holder's
			// Attach did not create were given no task by the holder:
			// the release never waits on their runners.
			if s.Scope == prp.ScopeTask {
				foreign++
			}
			continue
		}
		n, before, err := c.stopSession(ctx, s, leaseStopGrace)
		stopped += n
		earlier += before
		if err != nil {
			errs = append(errs, err)
		}
	}
	rep.Tasks = stopped + earlier
	if len(errs) > 0 {
		return rep, fmt.Errorf("controller: stop the tasks of lease %s: %w", leaseID, errors.Join(errs...))
	}
	rep.EvidenceKind = drivers.EvidenceRunnerAttested
	rep.Evidence = fmt.Sprintf("%d task(s) of %d runner session(s) stopped, attested by the runner (its process group and tag checks)", rep.Tasks, rep.Sessions)
	if earlier > 0 {
		rep.Evidence += fmt.Sprintf(", %d of them by an earlier stop", earlier)
	}
	if foreign > 0 {
		rep.Evidence += fmt.Sprintf("; %d task session(s) the holder's Attach did not create were not waited on", foreign)
	}
	return rep, nil
}

// stopSession stops the tasks of s whose stop is not verified yet and
// returns how many it verified now and how many were verified before.
func (c *Controller) stopSession(ctx context.Context, s Session, grace time.Duration) (int, int, error) {
	cmds, err := c.o.Store.CommandsAfter(ctx, s.ID, 0, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("session %s: %w", s.ID, err)
	}
	var tasks []string
	seen, proven := map[string]bool{}, map[string]bool{}
	for _, r := range cmds {
		switch r.Command.Kind {
		case prp.CommandTaskStart:
			task := prpwire.CommandTaskID(r.Command)
			if seen[task] || (r.Result != nil && r.Result.Status == prp.ResultRejected) {
				continue
			}
			seen[task] = true
			tasks = append(tasks, task)
		case prp.CommandTaskStop:
			if r.Result != nil && r.Result.Proof != nil && verified(*r.Result.Proof) {
				proven[prpwire.CommandTaskID(r.Command)] = true
			}
		}
	}
	var todo []string
	for _, task := range tasks {
		if !proven[task] {
			todo = append(todo, task)
		}
	}
	before := len(tasks) - len(todo)
	ids := make([]string, len(todo))
	for i, task := range todo {
		if ids[i], err = prp.NewID("stop"); err != nil {
			return 0, before, err
		}
		cmd := prpwire.SealCommand(prp.Command{ID: ids[i], Kind: prp.CommandTaskStop, Lease: s.Lease, Run: s.Run, TaskStop: &prp.TaskStop{TaskID: task, Grace: grace}})
		if _, _, err := c.o.Store.AppendCommand(ctx, s.ID, cmd, time.Now().UTC()); err != nil {
			return 0, before, fmt.Errorf("session %s: stop task %s: %w", s.ID, task, err)
		}
	}
	if len(todo) > 0 {
		c.notifySession(s.ID)
	}
	var bad []string
	for i, task := range todo {
		res, err := c.waitResult(ctx, s.ID, ids[i])
		switch {
		case err != nil:
			return 0, before, fmt.Errorf("session %s: stop of task %s not answered (runner connected here: %t): %w", s.ID, task, c.isConnected(s.ID), err)
		case res.Proof == nil:
			bad = append(bad, fmt.Sprintf("task %s: stop %s (%s): no proof", task, res.Status, res.Code))
		case !verified(*res.Proof):
			bad = append(bad, fmt.Sprintf("task %s: survivors %v, checks that could not run %v", task, res.Proof.Survivors, res.Proof.Failed))
		}
	}
	if len(bad) > 0 {
		return len(todo) - len(bad), before, fmt.Errorf("session %s: %w: %s", s.ID, ErrProofIncomplete, strings.Join(bad, "; "))
	}
	return len(todo), before, nil
}

// waitResult waits until command id of session has a result; ctx bounds
// the wait.
func (c *Controller) waitResult(ctx context.Context, session, id string) (prp.Result, error) {
	for {
		ch := c.sessionChanges(session)
		r, err := c.o.Store.GetCommand(ctx, session, id)
		if err != nil {
			return prp.Result{}, err
		}
		if r.State.Terminal() && r.Result != nil {
			return *r.Result, nil
		}
		if err := c.await(ctx, ch); err != nil {
			return prp.Result{}, err
		}
	}
}
