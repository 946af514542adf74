package local

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berthdev/berth/drivers"
)

// Release ends the session. Keep leaves the processes the session started
// running and needs no proof. Stop and Destroy kill every process group the
// session started (SIGKILL), wait until no process of them is left (zombies
// do not count), and return a confirmed StateDestroyed receipt with the
// evidence "session closed, N processes ended" (drivers.EvidenceTagScan:
// the groups and the runners' mark checked by berth, not the runner). If processes survive the
// grace period or ctx ends first, Release returns an unconfirmed receipt and
// an error, and may be called again. A second successful Release returns
// drivers.ErrReleased. The host itself is never touched. Every
// disposition closes the runner ingress, if open, and removes the lease's
// runner directory (socket and runner state directories, best effort);
// runners are detached from the session and keep running.
func (s *sandbox) Release(ctx context.Context, d drivers.Disposition) (drivers.Receipt, error) {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return drivers.Receipt{}, fmt.Errorf("local: release %s: %w", s.id, drivers.ErrReleased)
	}
	if d == drivers.Keep {
		s.released = true
		s.mu.Unlock()
		_, _ = s.closeRunner(ctx, true)
		return drivers.Receipt{ProviderLeaseID: s.id, State: drivers.StateRunning, Evidence: "session left open"}, nil
	}
	if d != drivers.Stop && d != drivers.Destroy {
		s.mu.Unlock()
		return drivers.Receipt{}, fmt.Errorf("local: release %s: unknown %s", s.id, d)
	}
	s.released = true // no new process may join while the session ends
	groups := make([]int, 0, len(s.groups))
	for g := range s.groups {
		groups = append(groups, g)
	}
	s.mu.Unlock()
	runners, err := s.closeRunner(ctx, false)
	if err != nil {
		s.mu.Lock()
		s.released = false
		s.mu.Unlock()
		return drivers.Receipt{ProviderLeaseID: s.id, State: drivers.StateRunning, Evidence: "session not closed: runner processes still running"}, err
	}

	ended := 0
	if len(groups) > 0 {
		n, _ := liveProcesses(groups)
		ended = n
		for _, g := range groups {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(s.d.grace)
	for {
		left, err := liveProcesses(groups)
		if err == nil && left == 0 {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			s.mu.Lock()
			s.released = false
			s.mu.Unlock()
			r := drivers.Receipt{ProviderLeaseID: s.id, State: drivers.StateRunning, Evidence: fmt.Sprintf("session not closed: %d processes still running", left)}
			return r, fmt.Errorf("local: release %s: %d processes still running: %w", s.id, left, drivers.ErrTimeout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond): // polling real processes
		}
	}
	s.mu.Lock()
	clear(s.groups)
	s.mu.Unlock()
	return drivers.Receipt{
		ProviderLeaseID: s.id, State: drivers.StateDestroyed, Confirmed: true, ConfirmedAt: time.Now(), EvidenceKind: drivers.EvidenceTagScan,
		Evidence: fmt.Sprintf("session closed, %d processes ended", ended) + runnerEvidence(runners),
	}, nil
}

// liveProcesses counts the processes, zombies excluded, whose process group
// is one of groups. It reads /proc; where /proc is missing it counts the
// groups that still exist instead.
func liveProcesses(groups []int) (int, error) {
	if len(groups) == 0 {
		return 0, nil
	}
	want := make(map[int]bool, len(groups))
	for _, g := range groups {
		want[g] = true
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		n := 0
		for _, g := range groups {
			if syscall.Kill(-g, 0) != syscall.ESRCH {
				n++
			}
		}
		return n, nil
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		state, pgrp, ok := procStat(e.Name())
		if ok && want[pgrp] && state != "Z" && state != "X" {
			n++
		}
	}
	return n, nil
}

// procStat reads the state and process group of /proc/<pid>/stat.
func procStat(pid string) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0], pgrp, err == nil
}

// runnerEvidence is the receipt's note on ended runner processes.
func runnerEvidence(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d runner processes ended", n)
}
