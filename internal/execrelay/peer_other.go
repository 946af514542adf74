//go:build !linux

package execrelay

import "net"

// peerPID reports no peer: where SO_PEERCRED is missing, a relay knows its
// socket by the file alone.
func peerPID(*net.UnixConn) (int, bool) { return 0, false }
