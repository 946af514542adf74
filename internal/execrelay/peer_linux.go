package execrelay

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerPID returns the pid of c's peer (SO_PEERCRED): for a connection a
// relay dialed, the process that listens on the socket; for one it
// accepted, the process that dialed.
func peerPID(c *net.UnixConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || gerr != nil {
		return 0, false
	}
	return int(cred.Pid), true
}
