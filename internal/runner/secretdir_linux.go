package runner

import (
	"errors"

	"golang.org/x/sys/unix"
)

// errNoOpenat2: the kernel has no openat2 (before Linux 5.6); the caller
// walks the path component by component instead.
var errNoOpenat2 = errors.New("openat2 unavailable")

// dirFlags open a directory for the *at calls only: O_PATH needs no read
// permission on it, only search permission on the way.
const dirFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC

// openNoSymlinks opens directory dir with openat2 and RESOLVE_NO_SYMLINKS:
// the kernel refuses a symlink in any component.
func openNoSymlinks(dir string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   dirFlags,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		// ENOSYS: an old kernel; EPERM: a seccomp filter that refuses it.
		return -1, errNoOpenat2
	}
	return fd, err
}
