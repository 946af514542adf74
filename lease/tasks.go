package lease

import (
	"context"
	"fmt"
	"strings"

	"github.com/berthdev/berth/drivers"
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
// hook or no runner session) and whether the lease has runner sessions.
func (m *Manager) stopTasks(ctx context.Context, l *Lease) (string, bool, error) {
	if m.o.Tasks == nil {
		return "", false, nil
	}
	cctx, cancel := retry.WithTimeout(ctx, m.o.Clock, m.o.CleanupBudget)
	defer cancel()
	rep, err := m.o.Tasks.StopTasks(cctx, l.ID)
	if err != nil {
		return "", true, fmt.Errorf("runner tasks of lease %s not proven stopped: %w", l.ID, err)
	}
	if rep.Sessions == 0 {
		return "", false, nil
	}
	ev := rep.Evidence
	if ev == "" {
		ev = fmt.Sprintf("%d task(s) of %d runner session(s) stopped and verified", rep.Tasks, rep.Sessions)
	}
	return "runner: " + ev, true, nil
}

// killRunners ends what a runner left on a host lease's live session sb:
// the runner runs detached (its own session), so ending the lease's
// command groups does not end it, nor a task that escaped its group. It
// kills every process tagged with the lease (EnvTag: the runner and its
// tasks carry it) and verifies by a /proc scan that none is left (the
// host lease's tag-kill check). It returns the evidence; an error when the
// check cannot run or processes survive.
func (m *Manager) killRunners(ctx context.Context, sb drivers.Sandbox, l *Lease) (string, error) {
	if !safeTag(l.ID) {
		return "", fmt.Errorf("lease %s: the id cannot be used as a process tag; an operator must check the host", l.ID)
	}
	cctx, cancel := retry.WithTimeout(ctx, m.o.Clock, m.o.CleanupBudget)
	defer cancel()
	// The raw sandbox's Exec carries no tag: the check never counts itself.
	res, err := sb.Exec(cctx, drivers.Command{Argv: []string{"sh", "-c", killTaggedScript, "berth-check", EnvTag + "=" + l.ID}})
	if err != nil {
		return "", fmt.Errorf("lease %s: the runner's tag check on the host: %w", l.ID, err)
	}
	out := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 {
		return "", fmt.Errorf("lease %s: the runner's tag check on the host failed (exit %d): %s %s", l.ID, res.ExitCode, out, strings.TrimSpace(string(res.Stderr)))
	}
	return fmt.Sprintf("host tag check: %s, a /proc scan finds no process tagged %s=%s", out, EnvTag, l.ID), nil
}

// endRunners runs killRunners for a host lease with a live session whose
// runner sessions exist (or could not be asked), and joins its evidence
// to ev.
func (m *Manager) endRunners(ctx context.Context, drv drivers.Driver, sb drivers.Sandbox, l *Lease, runners bool, ev string) (string, error) {
	if !runners || sb == nil || drv.Capabilities().Kind != drivers.KindHost {
		return ev, nil
	}
	kev, err := m.killRunners(ctx, sb, l)
	if err != nil {
		return ev, err
	}
	return withRunner(ev, kev), nil
}

// withRunner joins the runner's evidence and the sandbox's receipt.
func withRunner(runner, evidence string) string {
	if runner == "" {
		return evidence
	}
	return runner + "; " + evidence
}
