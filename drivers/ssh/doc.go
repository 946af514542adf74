// Package ssh is berth's driver for hosts reached over SSH
// (golang.org/x/crypto/ssh) with public-key authentication and strict host
// key checking. It is a host driver (drivers.KindHost): acquiring opens a
// session on an existing machine, releasing ends it and never touches the
// host otherwise.
//
//	line, fp, err := ssh.ScanHostKey(ctx, "build-1", 22) // check fp
//	d := ssh.New(nil)
//	cfg, err := d.Schema().Normalize(map[string]any{
//		"host": "build-1", "user": "agent", "known_hosts": line,
//		"private_key": pemText, // a secret, never in errors or logs
//	})
//	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: id})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"uname"}})
//	r, err := sb.Release(ctx, drivers.Destroy)
//
// New and the driver's Acquire are the entry points. The config (its Schema)
// has host, port, user, private_key (a secret: PEM text), known_hosts
// (known_hosts lines), workdir, and the knobs connect_timeout, keepalive,
// max_sessions and forwarding (what a probe measured the server to forward
// for the runner; "none" narrows runner_ingress away, CAP-2:
// its NarrowedBy, drivers.ConfigNarrower).
//
// Host keys: only keys listed in known_hosts for the host and port are
// accepted. No entry refuses the connection with drivers.ErrHostKeyUnknown,
// another key with drivers.ErrHostKeyMismatch; the error's text and
// errcode.MessageOf name host, port and the offered key's SHA256
// fingerprint (errcode.TargetOf is host:port). Trust
// on first use is only ScanHostKey, which returns the offered key as a
// known_hosts line for an operator to check and save. A refused client key
// is drivers.ErrAuth; a refused port, or one whose connect does not finish,
// is drivers.ErrUnreachable; a server that accepts and never finishes the
// handshake within connect_timeout is drivers.ErrTimeout (PRB-5).
//
// Connections are pooled per config (a hash of the fields that shape the
// connection and of the client's public key), shared by the leases of that
// config with reference counting, closed with their last lease, and
// redialed once when found broken. Sessions on one connection are limited
// to max_sessions (the server's MaxSessions, default 10), one kept for
// control commands; further commands queue.
//
// Acquire creates the workspace directory (mkdir -p) and reads back its
// physical path: the default directory of commands, and the path of the provider lease id
// "ssh://user@host:port/path". workdir "~" (the default) is the login
// user's home; "~/x" and relative paths are under the home; absolute paths
// are used as given. AcquireRequest.Workspace, if set, replaces the workdir
// (relative to it when relative).
//
// Commands: every command runs as its own process group on the server. The
// login user's shell must be a POSIX shell or /bin/sh must exist. The
// driver does not rely on the server's process-group behaviour (OpenSSH's
// sshd starts each session with setsid, Dropbear does not): the wrapper
// reads its own group (/proc/$$/stat, else ps) and, when it does not lead
// one, re-executes itself under setsid(1) (same pid, a new session and
// group). The command first reports the group it leads on a side channel
// (the first stderr line, stripped; 0 when no group could be made, e.g. no
// setsid), exports the lease's tag
// (BERTH_SSH_LEASE=<lease nonce>-<command number>, inherited by its
// children), then changes directory, exports Command.Env (no AcceptEnv
// needed) and execs Argv. Cancelling a command opens a control session that
// kills the group, every process of its session (pkill -s where available)
// and every process carrying the command's tag; Exec returns after the
// server ended it. A process that left the group and dropped the tag from
// its environment is not tracked. The sandbox's Start streams output
// (drivers.StreamExecer); its OpenTerminal runs a PTY with window changes
// (drivers.Terminal).
//
// Files (drivers.Files) go as tar over the session, through commands like
// any other (no SFTP: Debian's Dropbear has none), with the host's sh,
// tar, cat, stat and readlink (driverkit.ExecFiles: an archive or listing
// that ends before its end marker is drivers.ErrTransient, never a
// success). They are confined to the session's working directory: a path
// whose directory resolves outside it through a link the task planted is
// refused, and a link at the asked path is sent as the link. A host
// unpacks what comes back with tarsafe.Extract.
//
// Release kills the process groups of the lease's commands still running
// and every process of the login user carrying the lease's tag (read from
// /proc/PID/environ), reads back that the groups are gone (pgrep -s,
// kill -0) and that no process carries the tag, drops the connection
// reference and returns a confirmed StateDestroyed receipt. It is not
// confirmed (an error) when something survives, when a running command's
// group is unknown, or when the server has no /proc to read the tags from.
// This holds on any POSIX sshd (tested on OpenSSH and Dropbear).
//
// Dropbear before the fix of mkj/dropbear#321 (pull request #326; Debian
// bookworm's 2022.83 has the bug) closes a session channel that waits for
// its exec when another child of the connection exits, yet may still run
// the command, and ends the whole connection if that command writes
// output. On a Dropbear server the driver therefore sends its control
// commands over a second connection of their own, and every command start
// claims a path first (mkdir /tmp/.berth-claim-<tag>-<attempt>, removed at
// release): after an unanswered start the driver makes that claim itself
// over the control connection, so that the first session's command can no
// longer run, and starts the command again (at most 5 times); when the
// claim is already taken the command started there, and Start fails with
// a transient error that says so. With such a server set max_sessions to 2,
// so that each connection carries one session at a time: the conformance
// suite then passed 12 of 12 runs, against none of 6 at the default (its
// parallel subtest).
//
// Runner ingress (drivers.RunnerHost): HostRunner uploads the runner once
// per SHA-256 over the pooled connection into
// $HOME/.cache/berth/runner/<sha256> (directory mode 0700; written to a
// temporary name, checked with sha256sum or busybox sha256sum on the
// server, then renamed; a file already there with the right sum is used as
// it is, one with another sum is replaced). A binary that is no ELF
// executable is refused naming it; one whose ELF machine is not the
// server's (uname -m) with drivers.ErrUnsupported, before anything is
// copied. Uploaded binaries stay after the lease, keyed by their sum, for
// later leases; an operator removes the directory to reclaim the space. The
// ingress is opened before anything is uploaded: a remote forward of the
// unix socket /tmp/berth-<uid>/<lease key>/prp.sock (the key derived
// from the berth lease id, so that a session opened again for the lease
// from another process finds the same directory)
// (streamlocal-forward@openssh.com; OpenSSH's AllowStreamLocalForwarding,
// on by default), in directories of mode 0700 owned by the login user. A
// server that refuses it (Dropbear forwards TCP only) gets a TCP remote
// forward bound to its loopback (127.0.0.1, a port the server picks) and
// the runner's endpoint is http://127.0.0.1:PORT; other users of that host
// can connect to the port but reach no session, since every runner
// connection is authenticated by its one-use ticket and then its token. A
// server that refuses both makes HostRunner fail, before any upload, with
// an error wrapping drivers.ErrUnsupported (code unsupported) that names
// both refused requests. The sandbox's MeasureForwarding (what the probe
// calls) opens and closes such a forward and reports "unix", "tcp" or
// "none". Its host side is one listener for the lease: when the pooled
// connection breaks, the ingress redials it through the pool and opens the
// forward again at the same path (or port; a TCP forward's address is
// recorded in the lease directory, so a session another process opens for
// the lease asks for the same port), first removing the socket file
// the old forward left behind (sshd's default StreamLocalBindUnlink no
// keeps it). Launch starts the runner through driverkit.LaunchRunnerByExec,
// detached in its own session, so a dropped connection does not end it; its
// state directory (one per berth lease id) is in the lease directory, and
// its environment is marked (BERTH_HOSTED_RUNNER, inherited by its tasks);
// LogTail reads the end of the last launched runner's runner.log there with
// tail -c over the pooled connection. Closing the ingress cancels the
// forward and removes the socket and stops no runner. Release ends every
// marked process of the login user and every runner whose state directory
// is in the lease directory, found by its --state-dir= argument (a runner
// is not dumpable, so where the login is not root its environment cannot
// be read; its command line can): SIGTERM, then SIGKILL; survivors make
// the receipt unconfirmed. Then it removes the lease directory.
//
// Stop evidence (PRP-6): Release's receipt is drivers.EvidenceTagScan
// (berth's own check of the session's process groups and of the runners'
// mark). Where the login account is root and the host has a writable
// cgroup2 mount, driverkit.LaunchRunnerByExec starts the runner, and so its
// tasks, in a cgroup of the lease's own, which the lease manager's release
// check kills, sees empty and removes (drivers.EvidenceCgroup). Without a
// cgroup, a task that double-forks and re-executes with a cleared
// environment (env -i) carries neither the lease's tag nor the runner's
// mark: it evades the tag scan and keeps running after the release, and
// the lease's receipt says so.
//
// Isolation: none between leases of one account. Every lease of an
// environment runs as its configured login user, so one lease's tasks can
// read, write and signal every other lease's workspace, runner state and
// processes on that account, and anything of berth's that the account can
// reach (a SQLite store file, envctl's key file or the output sink, when
// they are on that host in the account's reach). HostRunner re-sums the
// cached runner binary each time, but a same-account task can replace it
// between that check and the exec. An operator gives each company, or
// each agent, an account of its own (one environment per account), keeps
// berth's data outside that account's reach. The cgroup evidence needs a
// root login today, whose tasks run as root too and could leave the cgroup
// (or do anything else on the host): a root login is for trusted work; an
// unprivileged account gets the tag scan, with its evasion.
//
// Secrets: the private key never appears in errors, logs, String or %#v of
// any value of this package; parse errors of the key are replaced by fixed
// reasons.
package ssh
