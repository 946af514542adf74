package controller

import (
	"context"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// Tasks and its TaskStatus are a diagnostic the controller's own tests
// read a session's tasks by: no host needs it (Task.Wait and
// Attachment.Events tell a host how its tasks run).

// TaskState is what the controller knows of a task (see Tasks).
type TaskState string

// The task states.
const (
	// TaskPending: the start is journaled; no task.started event is
	// stored yet and the runner is connected.
	TaskPending TaskState = "pending"
	// TaskRunning: the task started, has not exited, and its runner is
	// connected to this controller.
	TaskRunning TaskState = "running"
	// TaskUnknown: the task has not exited (as far as the store knows) and
	// its runner is not connected to this controller: it may run, have
	// exited, or be stopped by the runner's orphan grace. Heartbeats are
	// not activity: a connection is dropped when the runner misses them
	// (dead-after), and its tasks read unknown from then on until the
	// runner reconnects.
	TaskUnknown TaskState = "unknown"
	// TaskExited: the task's exit is stored (Exit says how it ended).
	TaskExited TaskState = "exited"
	// TaskFailed: the start has a result without an exit: rejected (nothing
	// ran) or indeterminate (the runner died while it executed, or its
	// events were lost: Result.Code prpwire.CodeEventsLost). Result says which.
	TaskFailed TaskState = "failed"
)

// TaskStatus is one task of a session as Tasks reports it.
type TaskStatus struct {
	TaskID string
	State  TaskState
	// PID is the task's process id from its task.started event (0: none).
	PID int
	// Exit is how the task ended, for TaskExited.
	Exit *prp.Exit
	// Result is the start command's result, once stored.
	Result *prp.Result
}

// Tasks authorizes p on session and returns its tasks in start order with
// what the controller knows of each. A task that has not exited reads
// TaskUnknown while the session's runner is not connected to this
// controller (a replica that does not hold the connection reads unknown
// too: it cannot tell). It reads the session's commands and events from
// the store (all of them: its cost grows with the session).
func (c *Controller) Tasks(ctx context.Context, p authz.Principal, session string) ([]TaskStatus, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return nil, err
	}
	connected := c.isConnected(s.ID)
	cmds, err := c.o.Store.CommandsAfter(ctx, s.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	evs, err := c.o.Store.EventsAfter(ctx, s.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	pids, exits := map[string]int{}, map[string]*prp.Exit{}
	for _, e := range evs {
		switch e.Event.Kind {
		case prp.EventStarted:
			pids[e.Event.TaskID] = e.Event.PID
		case prp.EventExit:
			exits[e.Event.TaskID] = e.Event.Exit
		}
	}
	var out []TaskStatus
	seen := map[string]bool{}
	for _, r := range cmds {
		task := prpwire.CommandTaskID(r.Command)
		if r.Command.Kind != prp.CommandTaskStart || seen[task] {
			continue
		}
		seen[task] = true
		st := TaskStatus{TaskID: task, PID: pids[task], Exit: exits[task], Result: r.Result}
		if st.Exit == nil && r.Result != nil {
			st.Exit = r.Result.Exit
		}
		_, started := pids[task]
		switch {
		case st.Exit != nil:
			st.State = TaskExited
		case r.Result != nil:
			st.State = TaskFailed
		case !connected:
			st.State = TaskUnknown
		case started:
			st.State = TaskRunning
		default:
			st.State = TaskPending
		}
		out = append(out, st)
	}
	return out, nil
}
