//go:build !linux

package runner

import (
	"errors"

	"golang.org/x/sys/unix"
)

// dirFlags open a directory for the *at calls.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC

// errNoOpenat2: there is no openat2 here; the caller walks the path
// component by component instead.
var errNoOpenat2 = errors.New("openat2 unavailable")

func openNoSymlinks(string) (int, error) { return -1, errNoOpenat2 }
