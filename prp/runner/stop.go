package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/prp"
)

// killWait bounds how long a stop waits for SIGKILLed processes to vanish
// before it verifies (and, if they have not, reports survivors).
const killWait = 10 * time.Second

// pollEvery is how often a stop looks whether the processes are gone.
const pollEvery = 10 * time.Millisecond

// stopTree stops the processes of group pgid (0: unknown) and every process
// whose environment carries tag (since: the task's start in clock ticks
// after boot, 0 if unknown; see taggedPIDs): SIGTERM, up to grace for them to exit,
// SIGKILL, then a verification (PRP-6). It never assumes: a check that
// cannot run makes the proof incomplete. reap collects zombie orphans.
func stopTree(ctx context.Context, taskID string, pgid int, since uint64, tag string, grace time.Duration, reap func()) prp.StopProof {
	signalTree(pgid, tag, since, unix.SIGTERM)
	waitGone(ctx, pgid, tag, since, grace, reap)
	if !treeGone(pgid, tag, since) {
		signalTree(pgid, tag, since, unix.SIGKILL)
		waitGone(ctx, pgid, tag, since, killWait, reap)
	}
	reap()
	return verifyStopped(taskID, pgid, since, tag)
}

func signalTree(pgid int, tag string, since uint64, sig unix.Signal) {
	if pgid > 0 {
		_ = unix.Kill(-pgid, sig)
	}
	// Escapees (setsid, a new group) are found by their tag; a process is
	// signalled on its own, its group is covered when it is tagged too.
	pids, _, _ := taggedPIDs(tag, since)
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
}

func waitGone(ctx context.Context, pgid int, tag string, since uint64, d time.Duration, reap func()) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		reap()
		if treeGone(pgid, tag, since) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

func treeGone(pgid int, tag string, since uint64) bool {
	if pgid > 0 {
		if m, err := groupLive(pgid); err != nil || len(m) > 0 {
			return false
		}
	}
	pids, unreadable, err := taggedPIDs(tag, since)
	return err == nil && unreadable == 0 && len(pids) == 0
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
