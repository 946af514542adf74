//go:build linux

package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procInfo is what the stop proof reads of one process in /proc.
type procInfo struct {
	pid, ppid, pgid int
	state           byte
	// start is the start time in clock ticks after boot.
	start uint64
}

// readStat parses /proc/<pid>/stat; ok is false when the process is gone.
func readStat(pid int) (procInfo, bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return procInfo{}, false, nil
		}
		return procInfo{}, false, err
	}
	return parseStat(pid, b)
}

// parseStat parses the contents b of /proc/<pid>/stat.
func parseStat(pid int, b []byte) (procInfo, bool, error) {
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procInfo{}, false, fmt.Errorf("runner: /proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return procInfo{}, false, fmt.Errorf("runner: /proc/%d/stat: unexpected format", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return procInfo{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0], start: start}, true, nil
}

// listPIDs returns the pids in /proc.
func listPIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// taggedPIDs returns the live (non-zombie) processes whose environment
// holds entry (KEY=value). unreadable counts the live processes whose
// environment could not be read although they may be the task's: same uid
// (or we are root), and not ruled out by their stat (unreadableMayBeTask:
// older than the task leader's start notBefore, in clock ticks after boot,
// when known; started from outside the runner's PID namespace). A process
// that ended before its stat was read is not counted. A non-zero count
// makes the scan inconclusive.
func taggedPIDs(entry string, notBefore uint64) (pids []int, unreadable int, err error) {
	all, err := listPIDs()
	if err != nil {
		return nil, 0, err
	}
	self := os.Getpid()
	buf := make([]byte, 16<<10) // reused for every environ
	statBuf := make([]byte, 1<<10)
	for _, pid := range all {
		if pid == self {
			continue
		}
		if notBefore > 0 {
			// A process older than the task cannot descend from it, and
			// its stat is far cheaper to read than its environment (which
			// takes the process's memory lock): skip it on its start time.
			var st []byte
			st, statBuf, err = readProcFile(pid, "stat", statBuf)
			if err == nil {
				if info, ok, perr := parseStat(pid, st); perr == nil && ok && info.start < notBefore {
					continue
				}
			}
		}
		var env []byte
		env, buf, err = readProcFile(pid, "environ", buf)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
				continue // gone while we looked
			}
			// One stat, read after the failed read, decides: a process
			// that ended meanwhile (gone, or a zombie) is not the task's
			// survivor, whatever kept its environment from us (under load
			// a process of the engine's exec set-up ends between the two
			// reads, and counting it made the proof inconclusive).
			info, ok, serr := readStat(pid)
			if serr == nil && (!ok || info.state == 'Z') {
				continue
			}
			if unreadableMayBeTask(info, serr == nil, notBefore) && mayBeOurs(pid) {
				unreadable++
			}
			continue
		}
		if hasEntry(env, entry) {
			if info, ok, _ := readStat(pid); ok && info.state != 'Z' {
				pids = append(pids, pid)
			}
		}
	}
	return pids, unreadable, nil
}

// hasEntry reports whether the NUL-separated list env holds entry.
func hasEntry(env []byte, entry string) bool {
	for len(env) > 0 {
		kv := env
		if i := bytes.IndexByte(env, 0); i >= 0 {
			kv, env = env[:i], env[i+1:]
		} else {
			env = nil
		}
		if string(kv) == entry {
			return true
		}
	}
	return false
}

// readProcFile reads /proc/<pid>/<name> into buf (grown as needed; the
// grown buffer is returned for reuse) with one open, reads and a close.
func readProcFile(pid int, name string, buf []byte) (data, grown []byte, err error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, buf, err
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := unix.Read(fd, buf[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, buf, err
		case m == 0:
			return buf[:n], buf, nil
		}
		n += m
	}
}

// mayBeOurs reports whether pid could be a task's process: it runs under
// our uid, or we are root. Processes of other users cannot descend from a
// task without a setuid binary; the proof documents that limit.
func mayBeOurs(pid int) bool {
	if os.Geteuid() == 0 {
		return true
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil {
		return false
	}
	return int(st.Uid) == os.Geteuid()
}

// unreadableMayBeTask reports whether a live process whose environment
// could not be read may still be the task's, from its stat (read is false
// when the stat could not be read either: then it may be). It may not be
// when it started before notBefore (the task leader's start; 0: unknown),
// since a process older than a task cannot descend from it, or when its
// parent is outside the runner's PID namespace (ppid 0, and not the
// namespace's init): a process the container runtime started there (an
// exec, such as a second runner launched beside this one, non-dumpable as
// every runner is, or an exec in the runtime's set-up before its execve,
// non-dumpable until then). A task's process cannot have such a parent:
// its orphans go to the runner, a subreaper, or to the namespace's init.
func unreadableMayBeTask(info procInfo, read bool, notBefore uint64) bool {
	if !read {
		return true
	}
	if notBefore > 0 && info.start < notBefore {
		return false
	}
	return info.ppid != 0 || info.pid == 1
}

// pidAlive reports whether pid runs: it exists and is not a zombie (true
// when /proc cannot tell).
func pidAlive(pid int) bool {
	info, ok, err := readStat(pid)
	return err != nil || ok && info.state != 'Z'
}

// startTicks returns pid's start time in clock ticks after boot, 0 if
// unknown.
func startTicks(pid int) uint64 {
	info, ok, err := readStat(pid)
	if err != nil || !ok {
		return 0
	}
	return info.start
}

// groupMembers returns the live (non-zombie) processes of group pgid.
func groupMembers(pgid int) ([]int, error) {
	all, err := listPIDs()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range all {
		info, ok, err := readStat(pid)
		if err != nil || !ok {
			continue
		}
		if info.pgid == pgid && info.state != 'Z' {
			out = append(out, pid)
		}
	}
	return out, nil
}

// becomeSubreaper makes orphaned task descendants children of the runner,
// so that reapOrphans can collect them instead of leaving zombies behind.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// reapGroup reaps the zombie children of the runner in group pgid (the
// runner's orphans, as a subreaper), without reading /proc. The caller
// makes sure that the group's leader is not a child os/exec still waits
// for.
func reapGroup(pgid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PGID, pgid, &info, unix.WEXITED|unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || info.Signo == 0 {
			return // no child in the group, or none has exited
		}
	}
}

// reapOrphans waits for the zombie children of the runner that are not in
// leaders (the task leaders os/exec waits for itself).
func reapOrphans(leaders map[int]bool) {
	all, err := listPIDs()
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, pid := range all {
		if leaders[pid] {
			continue
		}
		info, ok, err := readStat(pid)
		if err != nil || !ok || info.ppid != self || info.state != 'Z' {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// pipeSize is what a task's output pipes are grown to (best effort: the
// system's pipe-max-size may be lower), so that a task writes on while the
// runner sends what it read.
const pipeSize = 1 << 20

// growPipe sets the capacity of the pipe f to pipeSize, if it can.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
		})
	}
}

// pipeReader returns a read function for the pipe f that reads into buf
// what the pipe holds now, up to len(buf), waiting only while it holds
// nothing: one output chunk per read, not one per write of the task. On a
// blocking descriptor it is f.Read.
func pipeReader(f *os.File) func(buf []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return f.Read
	}
	nonblock := false
	_ = rc.Control(func(fd uintptr) {
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		nonblock = err == nil && fl&unix.O_NONBLOCK != 0
	})
	if !nonblock {
		return f.Read
	}
	return func(buf []byte) (int, error) {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			for n < len(buf) {
				m, err := unix.Read(int(fd), buf[n:])
				switch {
				case err == unix.EINTR:
					continue
				case err == unix.EAGAIN:
					return n > 0 // nothing yet: wait for the poller
				case err != nil:
					rerr = err
					return true
				case m == 0:
					rerr = io.EOF
					return true
				}
				n += m
			}
			return true
		})
		if err != nil {
			return n, err
		}
		return n, rerr
	}
}

// MakeUndumpable makes the calling process non-dumpable
// (prctl(PR_SET_DUMPABLE, 0)): processes of the same user, such as the
// runner's tasks, can then no longer read its memory, /proc/<pid>/environ
// or fds, or ptrace it. The runner binary calls it before it reads its
// ticket; the runner's children are dumpable again after their execve.
func MakeUndumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("runner: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
