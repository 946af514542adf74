//go:build unix

package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lockStateDir takes the state directory's lock (an exclusive flock on
// its lock file, held while the runner runs) and returns the func that
// releases it. A directory another live runner holds is ErrStateDirBusy:
// that runner is asked to reconnect at once (nudge), and this one runs
// nothing, so that one journal is never served by two runners.
func lockStateDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("runner: state directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			nudge(dir)
			return nil, permanent{fmt.Errorf("%w: %s; it was asked to reconnect now", ErrStateDirBusy, dir)}
		}
		return nil, fmt.Errorf("runner: lock the state directory %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	_ = os.Remove(filepath.Join(dir, nudgeFile)) // a nudge for an earlier runner
	return func() { f.Close() }, nil
}
