package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/internal/prp"
)

// killWait bounds how long a stop waits for SIGKILLed processes to vanish
// before it verifies (and, if they have not, reports survivors).
const killWait = 10 * time.Second

// exitWait bounds how long a stop whose proof is complete waits for the
// task's exit event to be sent before the proof.
const exitWait = 2 * time.Second

// pollEvery is how often a stop looks whether the processes are gone when
// nothing woke it before (a SIGCHLD or the leader's exit wakes it at once):
// it covers processes that are not the runner's children.
const pollEvery = 10 * time.Millisecond

// stopTree stops task taskID: the processes of group pgid (0: unknown) and
// every process whose environment carries the task's tag (since: the
// task's start in clock ticks after boot, 0 if unknown; see taggedPIDs).
// SIGTERM to the group, up to grace for it to go, SIGKILL; once the group
// is gone one /proc scan looks for tagged escapees (setsid, a new group),
// which get SIGTERM, grace, SIGKILL in turn; then the proof (PRP-6). It
// never assumes: a check that cannot run makes the proof incomplete.
// exited, if not nil, is closed when the group's leader was reaped.
//
// The waits are woken by SIGCHLD (the runner is the parent of every leader
// and, as a subreaper, of the orphans), by the leader's exit and, for
// processes that are not its children, by a poll every pollEvery; the
// group check is one kill(-pgid, 0), orphans are reaped by group
// (waitid), and /proc is scanned once, for the tag, when the group is gone.
func (r *Runner) stopTree(ctx context.Context, taskID string, pgid int, since uint64, grace time.Duration, exited <-chan struct{}) prp.StopProof {
	tag := r.Tag(taskID)
	if pgid <= 0 {
		// No group to wait for: the tag scan is all there is.
		r.stopTagged(ctx, tag, since, nil, grace)
		return verifyStopped(taskID, pgid, since, tag)
	}
	_ = unix.Kill(-pgid, unix.SIGTERM)
	if !r.waitGroup(ctx, pgid, grace, exited) {
		_ = unix.Kill(-pgid, unix.SIGKILL)
		r.waitGroup(ctx, pgid, killWait, exited)
	}
	proof := verifyStopped(taskID, pgid, since, tag)
	if proof.Complete || len(proof.Survivors) == 0 {
		return proof
	}
	r.stopTagged(ctx, tag, since, proof.Survivors, grace)
	return verifyStopped(taskID, pgid, since, tag)
}

// stopTagged stops the processes carrying tag (pids: those a scan found
// already, nil to scan): SIGTERM, up to grace, then SIGKILL to whatever a
// new scan finds, and up to killWait for them to go.
func (r *Runner) stopTagged(ctx context.Context, tag string, since uint64, pids []int, grace time.Duration) {
	if pids == nil {
		pids, _, _ = taggedPIDs(tag, since)
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGTERM)
	}
	if r.waitPIDs(ctx, pids, grace) {
		return
	}
	pids, _, _ = taggedPIDs(tag, since)
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	r.waitPIDs(ctx, pids, killWait)
}

// waitGroup waits up to d until group pgid is gone: kill(-pgid, 0) says
// ESRCH, or (checked on the poll) only zombies are left in it. On every
// wake it reaps the group's zombie orphans (reapGroup: once the leader
// was reaped, no /proc scan).
func (r *Runner) waitGroup(ctx context.Context, pgid int, d time.Duration, exited <-chan struct{}) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		woken := r.childEvents() // before the check: a SIGCHLD after it wakes us
		r.reapGroup(pgid)
		if errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) {
			return true
		}
		select {
		case <-woken:
		case <-exited:
			exited = nil
		case <-tick.C:
			r.reap()
			if m, err := groupLive(pgid); err == nil && len(m) == 0 {
				return true
			}
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// waitPIDs waits up to d until none of pids is alive (gone, or a zombie;
// the runner's zombie orphans are reaped on the poll).
func (r *Runner) waitPIDs(ctx context.Context, pids []int, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		woken := r.childEvents()
		live := false
		for _, pid := range pids {
			if pidAlive(pid) {
				live = true
				break
			}
		}
		if !live {
			return true
		}
		select {
		case <-woken:
		case <-tick.C:
			r.reap()
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// groupLive returns the live members of group pgid: none when kill(-pgid, 0)
// says ESRCH, else the non-zombie members found in /proc (a group of
// zombies runs nothing; their parent has not reaped them yet).
func groupLive(pgid int) ([]int, error) {
	err := unix.Kill(-pgid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("kill(-%d, 0): %v", pgid, err)
	}
	return groupMembers(pgid)
}

// verifyStopped builds the proof: the group check and the tag scan, each
// either ran (in Methods) or could not (in Failed).
func verifyStopped(taskID string, pgid int, since uint64, tag string) prp.StopProof {
	p := prp.StopProof{TaskID: taskID, Survivors: []int{}}
	if pgid > 0 {
		if m, err := groupLive(pgid); err != nil {
			p.Failed = append(p.Failed, prp.MethodGroup+": "+err.Error())
		} else {
			p.Methods = append(p.Methods, prp.MethodGroup)
			p.Survivors = append(p.Survivors, m...)
		}
	} else {
		p.Failed = append(p.Failed, prp.MethodGroup+": the process group is not known")
	}
	pids, unreadable, err := taggedPIDs(tag, since)
	switch {
	case err != nil:
		p.Failed = append(p.Failed, prp.MethodProcTag+": "+err.Error())
	case unreadable > 0:
		p.Failed = append(p.Failed, fmt.Sprintf("%s: %d processes that may be the task's could not be read", prp.MethodProcTag, unreadable))
		p.Survivors = appendNew(p.Survivors, pids)
	default:
		p.Methods = append(p.Methods, prp.MethodProcTag)
		p.Survivors = appendNew(p.Survivors, pids)
	}
	p.VerifiedAt = time.Now().UTC()
	p.Complete = len(p.Failed) == 0 && len(p.Survivors) == 0
	return p
}

func appendNew(s, add []int) []int {
	for _, x := range add {
		found := false
		for _, y := range s {
			found = found || x == y
		}
		if !found {
			s = append(s, x)
		}
	}
	return s
}
