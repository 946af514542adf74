package lease

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/internal/retry"
)

// TaskStopper is the lease manager's hook into the runner protocol
// (Options.Tasks; prp/controller.Controller implements it). Before a
// release or a cleanup stops or destroys a lease's sandbox, the manager
// calls StopTasks: every task of every runner session of the lease must be
// stopped and its stop verified (PRP-6). The manager calls it only after
// it authorized the release (ActionLease) or the sweep (ActionSweep); it
// is not an entry point for principals.
type TaskStopper interface {
	// StopTasks stops every task of every runner session of lease and
	// verifies each stop. A lease without runner sessions reports zero
	// sessions and a nil error. An incomplete proof, a refused stop or a
	// runner that does not answer before ctx ends is an error naming the
	// sessions and tasks; the lease then stays pending_cleanup with it.
	StopTasks(ctx context.Context, lease string) (TaskStopReport, error)
	// LeaseEnded says that this process no longer holds the lease's
	// sandbox (it was released, kept, or another manager ended it): what
	// serves the lease's runners from this process (an ingress server) is
	// closed. It stops no task and does not block.
	LeaseEnded(lease string)
}

// TaskStopReport is what a TaskStopper proved.
type TaskStopReport struct {
	// Sessions counts the runner sessions of the lease; Tasks the tasks
	// whose stop is verified (now or by an earlier stop).
	Sessions, Tasks int
	// Evidence says how the stops were verified, for the lease's cleanup
	// receipt (Lease.CleanupEvidence).
	Evidence string
}

// stopTasks runs the TaskStopper for l on the cleanup budget. It returns
// the evidence to put before the sandbox's receipt ("" when there is no
// hook or no runner session).
func (m *Manager) stopTasks(ctx context.Context, l *Lease) (string, error) {
	if m.o.Tasks == nil {
		return "", nil
	}
	cctx, cancel := retry.WithTimeout(ctx, m.o.Clock, m.o.CleanupBudget)
	defer cancel()
	rep, err := m.o.Tasks.StopTasks(cctx, l.ID)
	if err != nil {
		return "", fmt.Errorf("runner tasks of lease %s not proven stopped: %w", l.ID, err)
	}
	if rep.Sessions == 0 {
		return "", nil
	}
	ev := rep.Evidence
	if ev == "" {
		ev = fmt.Sprintf("%d task(s) of %d runner session(s) stopped and verified", rep.Tasks, rep.Sessions)
	}
	return "runner: " + ev, nil
}

// withRunner joins the runner's evidence and the sandbox's receipt.
func withRunner(runner, evidence string) string {
	if runner == "" {
		return evidence
	}
	return runner + "; " + evidence
}
