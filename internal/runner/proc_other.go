//go:build !linux

package runner

import (
	"errors"
	"os"
	"syscall"
)

var errNoProc = errors.New("runner: no /proc on this system")

func taggedPIDs(string, uint64) ([]int, int, error) { return nil, 0, errNoProc }

func startTicks(int) uint64 { return 0 }

func groupMembers(int) ([]int, error) { return nil, errNoProc }

func becomeSubreaper() error { return errNoProc }

func reapOrphans(map[int]bool) {}

func growPipe(*os.File) {}

func pipeReader(f *os.File) func([]byte) (int, error) { return f.Read }

func reapGroup(int) {}

func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// MakeUndumpable does nothing on this platform (Linux only).
func MakeUndumpable() error { return nil }
