// Package ssh is berth's driver for hosts reached over SSH
// (golang.org/x/crypto/ssh) with public-key authentication and strict host
// key checking. It is a host driver (drivers.KindHost): acquiring opens a
// session on an existing machine, releasing ends it and never touches the
// host otherwise.
//
// Start with New and Driver.Acquire (driver.go). The config (config.go,
// Driver.Schema) has host, port, user, private_key (a secret: PEM text),
// known_hosts (known_hosts lines), workdir, and the knobs connect_timeout,
// keepalive and max_sessions.
//
// Host keys (hostkey.go): only keys listed in known_hosts for the host and
// port are accepted. No entry refuses the connection with
// drivers.ErrHostKeyUnknown, another key with drivers.ErrHostKeyMismatch;
// both are *HostKeyError values naming host, port and the offered key's
// SHA256 fingerprint. Trust on first use is only ScanHostKey, which returns
// the offered key as a known_hosts line for an operator to check and save.
// A refused client key is drivers.ErrAuth; a refused port, or one whose
// connect does not finish, is drivers.ErrUnreachable; a server that accepts
// and never finishes the handshake within connect_timeout is
// drivers.ErrTimeout (PRB-5).
//
// Connections (conn.go) are pooled per config (a hash of the fields that
// shape the connection and of the client's public key), shared by the
// leases of that config with reference counting, closed with their last
// lease, and redialed once when found broken. Sessions on one connection are
// limited to max_sessions (the server's MaxSessions, default 10), one kept
// for control commands; further commands queue.
//
// Acquire creates the workspace directory (mkdir -p) and reads back its
// physical path: Workspace.Cwd, and the path of the provider lease id
// "ssh://user@host:port/path". workdir "~" (the default) is the login
// user's home; "~/x" and relative paths are under the home; absolute paths
// are used as given. AcquireRequest.Workspace, if set, replaces the workdir
// (relative to it when relative).
//
// Commands (script.go, process.go): every command runs as its own process
// group on the server. The login user's shell must be a POSIX shell or
// /bin/sh must exist; scripts rely on sshd starting every session with
// setsid, as OpenSSH does. The command first reports its group id on a side
// channel (the first stderr line, stripped), then changes directory, exports
// Command.Env (no AcceptEnv needed) and execs Argv. Cancelling a command
// opens a control session that kills the group and every process of its
// session (pkill -s where available); Exec returns after the server ended
// it. Processes that left the session themselves (setsid, daemons) are not
// tracked. The sandbox's Start streams output (drivers.StreamExecer);
// its OpenTerminal runs a PTY with window changes (drivers.Terminal).
//
// Release (sandbox.go) kills the process groups of the lease's
// commands still running, reads back with kill -0 that none is left, drops
// the connection reference and returns a confirmed StateDestroyed receipt.
//
// Secrets: the private key never appears in errors, logs, String or %#v of
// any value of this package; parse errors of the key are replaced by fixed
// reasons.
package ssh
