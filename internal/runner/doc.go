// Package runner is the runner side of berth's runner protocol (PRP, SPEC
// PRP-1..8): a process inside a sandbox that dials out to the controller,
// executes tasks and streams their output back, with nothing lost or run
// twice across reconnects and runner restarts. cmd/berth-runner is its
// binary.
//
//	if err := runner.MakeUndumpable(); err != nil { ... } // first
//	r, err := runner.New("unix:/.berth/run/prp.sock", stateDir,
//		&runner.Options{Lease: lease, Ticket: ticket, Subreaper: true})
//	err = r.Run(ctx) // reconnects until ctx ends, it is refused or its state directory is gone
//	if errors.Is(err, runner.ErrRefused) { os.Exit(1) }
//
// New and Runner.Run are the entry points. Then, by concern:
//
//   - Options (lease, ticket, platform func, backoff, limits, subreaper),
//     DefaultPlatform, TicketEnv and TagEnv.
//   - Bootstrap: the ticket exchange over HTTP before the upgrade; the
//     token and the session's state key it returns live in memory only.
//   - One connection: Dial with the subprotocol berth.prp.v1, SetReadLimit
//     at once, hello, welcome, then one reader, one writer and a heartbeat
//     (Ping with the reader running).
//   - The command loop: idempotency through the journal
//     (duplicate, conflict), scope checks, the probe identity refusing
//     every task, task.stop with its proof.
//   - The command journal (received, executing, done, indeterminate,
//     result), fsynced before a command executes; each line carries an HMAC
//     under the state key, chained over the previous line.
//   - The bounded file-backed outbox; Append blocks when it is full
//     (backpressure), replay starts at the controller's ack + 1; each
//     record carries an HMAC under the state key.
//   - Tasks: each in its own process group, tagged with TagEnv.
//   - Secrets: a task's secret values (from the TypeSecrets frame that
//     precedes its task.start, kept in memory only) go into its environment
//     or into 0600 files removed when it ends, each one the runner created
//     itself (O_CREAT|O_EXCL, no symlink followed in any component: openat2
//     RESOLVE_NO_SYMLINKS on Linux, else an O_NOFOLLOW walk); a file or
//     symlink already at the path, or a symlinked parent, refuses the task
//     (prpwire.CodeSecretFile), and on any error nothing holding a value
//     remains. A task.start whose values did not arrive, or died with a
//     previous runner (a command journaled received but not started), is
//     refused secrets_missing: it never runs without them.
//   - Stopping: SIGTERM, grace, SIGKILL, and the stop proof
//     (kill(-pgid, 0) = ESRCH, and no process in /proc carries the tag). A
//     stop waits without polling /proc: SIGCHLD and the leader's exit wake
//     it, orphans are reaped by group (waitid), the group check is one
//     kill(-pgid, 0); /proc is scanned once the group is gone, for tagged
//     escapees (which then get SIGTERM, grace, SIGKILL) and for the proof.
//
// Nothing a task can reach is trusted (issue 22): tasks run as the runner's
// user and can read and write its state directory. The state directory
// holds the journal, the outbox, the runner's id and the session it belongs
// to (with an HMAC under the state key: a resume ticket is used only on its
// session's own directory), never a secret: the token and the state key
// live in the runner's memory, and the binary makes itself non-dumpable
// (MakeUndumpable) before it reads its ticket, so that a task cannot read
// its memory, environment or fds. Nor can a host's check that runs as the
// same unprivileged account: it finds a runner by its command line, which
// stays readable (driverkit.LaunchRunnerByExec passes --lease= and
// --state-dir= as one argument each for that). A journal line that fails its check is
// never acted on (its command is indeterminate, journal_unauthenticated,
// never run again); an outbox record that fails drops itself and what
// precedes it, which the controller reports as events_lost. A runner
// restarted on its state directory (after kill -9, say) needs a resume
// ticket of its session (the controller's MintResumeTicket; Attach mints
// one when it relaunches it), which returns the same state key; it replays
// its journal and outbox, reports commands it was executing as
// indeterminate and stops what is left of their tasks, and answers commands
// it had received but not started as rejected "interrupted" (nothing ran;
// the resume cursor keeps them from being sent again).
//
// One runner per state directory: Run holds an exclusive lock on the
// directory (flock on its lock file) while it runs. A runner launched on a
// directory another live runner holds (a host that took a disconnected
// runner for gone and relaunched it) exchanges nothing and returns
// ErrStateDirBusy, after it asked the live one to reconnect at once (a
// nudge file that a runner waiting out its backoff looks for): so one
// journal is never served by two runners, and a command is never run by a
// runner that did not journal the ones before it. Tasks can write the
// state directory, so neither file is trusted: the lock file is opened
// without following a symlink and must be a regular file of one link owned
// by the runner's user (else Run refuses the directory), the nudge file is
// created O_EXCL without following a symlink (nothing is truncated), and a
// runner takes one nudge per disconnection (a task writing the nudge file
// over and over cannot turn the backoff into a reconnect storm). A task
// can still keep its own lease's runner from coming back (it can kill it,
// hold the lock, or remove the session file); that is no other lease's.
//
// Durability: the journal is fsynced at every state change but received
// (written, then synced with the executing or done line that follows it
// before anything runs); the outbox is written (one write per event) but
// never fsynced, so it survives a runner kill -9 (the written pages belong
// to the kernel) but may lose its tail in a crash of the sandbox's kernel;
// the hello's resume cursor then shows the controller which events are gone
// (events_lost).
//
// Output: a task's pipes are grown to 1 MiB and read as they fill, each
// read taking what the pipe holds (up to the welcome's max output chunk)
// without waiting for more. An output event is kept in the outbox as a
// binary record and sent as a binary frame (prpwire.OutputFrame) when the
// controller granted prpwire.CapBinaryOutput, else as a JSON envelope.
// Each frame reaches the controller's socket in one write (coalesce.go:
// the WebSocket library masks a client's frames through a 4 KiB buffer,
// which made 64 writes of a 256 KiB chunk). The outbox writes each ack in
// place in its ack file, one write per ack.
//
// Limits: a task that truncates the journal's tail (its last complete
// lines) is not detected: a command whose every line it removed is sent
// again and may run again. The proof has no cgroup check yet (no cgroup v2
// here to test one); the tag scan does not see a process that re-executed
// itself with a cleared environment, nor processes of other users (a task
// cannot become another user without a setuid binary). A process whose
// environment the scan cannot read (a non-dumpable one) and which may be
// the task's makes the proof incomplete; one whose parent is outside the
// runner's PID namespace (an exec the container runtime started, such as
// a second runner) cannot descend from a task and is passed over. On
// systems without /proc the tag check cannot run and every proof is
// incomplete.
package runner
