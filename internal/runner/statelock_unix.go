//go:build unix

package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// lockStateDir takes the state directory's lock (an exclusive flock on
// its lock file, held while the runner runs) and returns the func that
// releases it. A directory another live runner holds is ErrStateDirBusy:
// that runner is asked to reconnect at once (nudge), and this one runs
// nothing, so that one journal is never served by two runners.
//
// Tasks can write the state directory (package doc): the lock file is
// opened without following a symlink (O_NOFOLLOW) and must be a regular
// file with one link, owned by the runner's user, else Run refuses (the
// error names the path); so a task that planted a symlink or a hard link
// at the lock's path never gets the runner to create, lock or truncate
// another file.
//
// gone reports whether the lock file has no link left: the state
// directory was removed (a host lease's release removes the lease
// directory) or the lock file was.
func lockStateDir(dir string) (unlock func(), gone func() bool, err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, nil, fmt.Errorf("runner: state directory %s: lock file %s is a symlink: refusing it", dir, path)
		}
		return nil, nil, fmt.Errorf("runner: state directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("runner: state directory %s: lock file %s: %w", dir, path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, nil, fmt.Errorf("runner: state directory %s: lock file %s is not a regular file of one link owned by the runner's user: refusing it", dir, path)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			nudge(dir)
			return nil, nil, permanent{fmt.Errorf("%w: %s; it was asked to reconnect now", ErrStateDirBusy, dir)}
		}
		return nil, nil, fmt.Errorf("runner: lock the state directory %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	_ = os.Remove(filepath.Join(dir, nudgeFile)) // a nudge for an earlier runner
	gone = func() bool {
		var st unix.Stat_t
		return unix.Fstat(int(f.Fd()), &st) == nil && st.Nlink == 0
	}
	return func() { f.Close() }, gone, nil
}

// nudge asks the runner that holds dir's lock to reconnect at once: it
// creates the nudge file, never following a symlink and never truncating
// what is there (O_EXCL|O_NOFOLLOW): an entry already at the path (a
// pending nudge, or whatever a task put there) is left as it is, and the
// waiting runner's removal of it counts as the nudge.
func nudge(dir string) {
	f, err := os.OpenFile(filepath.Join(dir, nudgeFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err == nil {
		f.Close()
	}
}
