package lease

import (
	"context"
	"fmt"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/internal/retry"
)

// poolRunnerStarter is what the runner protocol's hook
// (leasehook.TaskStopper, m.tasks) may also be (the runner
// controller's is): StartPoolRunner launches the runner of h, a starting
// member of a runner pool (authz.InstanceCompany; its record holds the provider
// id), and returns once that runner is connected, its session the
// instance's until the lease that adopts the member takes it over (the
// controller's Attach). It acts for no principal: only the manager, for
// the members it starts, calls it.
//
// PoolRunnerConnected and ReconnectPoolRunner serve the pooled members
// another process started, whose runners lost their ingress with that
// process: PoolRunnerConnected reports whether a member's runner is
// connected to any replica (or served here), and ReconnectPoolRunner
// serves h's ingress here and has its runner reconnect, returning once it
// is connected.
type poolRunnerStarter interface {
	StartPoolRunner(ctx context.Context, h *Handle) error
	PoolRunnerConnected(ctx context.Context, lease string) (bool, error)
	ReconnectPoolRunner(ctx context.Context, h *Handle) error
}

// stopTasks runs the runner protocol's hook (leasehook.TaskStopper) for l on the cleanup budget. It returns
// the evidence to put before the sandbox's receipt ("" when there is no
// hook, no runner session or a lease acquired without a runner) and
// whether the lease has runner sessions.
func (m *Manager) stopTasks(ctx context.Context, l *Lease) (string, bool, error) {
	if m.tasks == nil || l.Runner == nil {
		return "", false, nil
	}
	cctx := m.withBudget(ctx, m.now().Add(m.o.knobs.CleanupBudget))
	defer cctx.cancel()
	rep, err := m.tasks.StopTasks(cctx, l.ID)
	if err != nil {
		return "", true, fmt.Errorf("runner tasks of lease %s not proven stopped: %w", l.ID, err)
	}
	if rep.Sessions == 0 {
		return "", false, nil
	}
	ev := rep.Evidence
	if ev == "" {
		ev = fmt.Sprintf("%d task(s) of %d runner session(s) stopped", rep.Tasks, rep.Sessions)
	}
	kind := rep.EvidenceKind
	if kind == drivers.EvidenceNone {
		kind = drivers.EvidenceRunnerAttested
	}
	return fmt.Sprintf("runner (%s): %s", kind, ev), true, nil
}

// killRunners ends what a runner left on a host lease's live session sb:
// the runner runs detached (its own session), so ending the lease's
// command groups does not end it, nor a task that escaped its group. It
// runs the host lease's own check (hostCheck) over a fresh command of the
// session, in which no runner takes part. It returns the evidence and its
// kind; an error when the check cannot run or processes survive.
func (m *Manager) killRunners(ctx context.Context, sb drivers.Sandbox, l *Lease) (string, drivers.EvidenceKind, error) {
	if !safeTag(l.ID) {
		return "", drivers.EvidenceNone, fmt.Errorf("lease %s: the id cannot be used as a process tag; an operator must check the host", l.ID)
	}
	cctx, cancel := retry.WithTimeout(ctx, m.o.clock, m.o.knobs.CleanupBudget)
	defer cancel()
	ev, kind, err := hostCheck(cctx, sb, l.ID)
	if err != nil {
		return "", drivers.EvidenceNone, fmt.Errorf("lease %s: the runner's check on the host: %w", l.ID, err)
	}
	return "host check: " + ev, kind, nil
}

// tagScanCaveat is what a tag_scan receipt says of its limit (PRP-6).
const tagScanCaveat = "no cgroup for the lease, so a task that cleared its environment (env -i) on this account would evade this scan"

// hostCheck is a host lease's own check over a command of sb, which must
// run as a fresh session outside the lease's processes (the raw sandbox's
// Exec carries no tag: the check never counts itself). It ends the lease's
// cgroup where its runner got one (driverkit.CgroupKillScript: kill, wait
// until empty, remove), then kills every process tagged with the lease
// (envTag: the runner and its tasks carry it) and every runner launched
// for it (by its --lease= argument, since a runner is not dumpable and
// the account's other processes cannot read its environment), and
// verifies by a /proc scan that none is left. The kind is drivers.EvidenceCgroup when a cgroup was
// emptied and removed, else drivers.EvidenceTagScan, whose evidence names
// its limit (tagScanCaveat).
func hostCheck(ctx context.Context, sb drivers.Sandbox, id string) (string, drivers.EvidenceKind, error) {
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", driverkit.CgroupKillScript, "berth-check", id}})
	if err != nil {
		return "", drivers.EvidenceNone, fmt.Errorf("cgroup check: %w", err)
	}
	cg := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 {
		return "", drivers.EvidenceNone, fmt.Errorf("cgroup check failed (exit %d): %s %s", res.ExitCode, cg, strings.TrimSpace(string(res.Stderr)))
	}
	res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", killTaggedScript, "berth-check", envTag + "=" + id, breQuote(id)}})
	if err != nil {
		return "", drivers.EvidenceNone, fmt.Errorf("tag check: %w", err)
	}
	out := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 {
		return "", drivers.EvidenceNone, fmt.Errorf("tag check failed (exit %d): %s %s", res.ExitCode, out, strings.TrimSpace(string(res.Stderr)))
	}
	scan := fmt.Sprintf("%s, a /proc scan finds no process tagged %s=%s and no runner of the lease", out, envTag, id)
	if cg == "no cgroup" {
		return fmt.Sprintf("%s: %s; %s", drivers.EvidenceTagScan, scan, tagScanCaveat), drivers.EvidenceTagScan, nil
	}
	return fmt.Sprintf("%s: %s; %s", drivers.EvidenceCgroup, cg, scan), drivers.EvidenceCgroup, nil
}

// endRunners runs killRunners for a host lease with a live session whose
// runner sessions exist (or could not be asked), or whose session this
// manager opened again after another holder (Manager.Open: the first
// holder's commands carry the lease's tag, not this session's), and joins
// its evidence to ev. kind is the host check's (drivers.EvidenceNone when
// none ran).
func (m *Manager) endRunners(ctx context.Context, drv drivers.Driver, sb drivers.Sandbox, l *Lease, runners bool, ev string) (string, drivers.EvidenceKind, error) {
	if sb == nil || drv.Capabilities().Kind != drivers.KindHost {
		return ev, drivers.EvidenceNone, nil
	}
	if h := m.liveHandle(l.ID); !runners && (h == nil || !h.resumed) {
		return ev, drivers.EvidenceNone, nil
	}
	kev, kind, err := m.killRunners(ctx, sb, l)
	if err != nil {
		return ev, drivers.EvidenceNone, err
	}
	return withRunner(ev, kev), kind, nil
}

// withRunner joins the runner's evidence and the sandbox's receipt.
func withRunner(runner, evidence string) string {
	if runner == "" {
		return evidence
	}
	return runner + "; " + evidence
}

// withCaveat appends tagScanCaveat to the evidence of a tag_scan receipt
// that does not name it yet (PRP-6: the evasion is named in the receipt).
func withCaveat(evidence string, kind drivers.EvidenceKind) string {
	if kind != drivers.EvidenceTagScan || strings.Contains(evidence, tagScanCaveat) {
		return evidence
	}
	return evidence + "; " + tagScanCaveat
}
