// Package controller is the host's side of berth's runner protocol (PRP,
// SPEC PRP-1..8): an http.Handler that exchanges bootstrap tickets for
// connection tokens and serves the runners' WebSocket connections, the
// dispatch of tasks to them, and the durable intake of their events.
//
//	c, tasks, err := controller.New(signer, leases, resolver, opts)
//	mux.Handle("/prp/", c) // runners that dial in: exchange, connect
//	// berth.New gives tasks to the lease manager (sys.Leases())
//	att, err := c.Attach(ctx, operator, h, controller.AttachRequest{})
//	task, err := att.Start(ctx, operator, controller.TaskSpec{
//		TaskStart: prp.TaskStart{Argv: []string{"make", "test"}},
//		Stdout:    os.Stdout})
//	exit, err := task.Wait(ctx) // exit.Code
//	proof, err := task.Stop(ctx) // runner_attested
//
// It is berth's own (issue 48: it was the public prp/controller): no host
// calls it. berth.New builds it over store.Stores.Runners (a sealed
// store.RunnerStore: SealStore) from Options' Runner fields, and
// lease.Handle.Run, Handle.Reattach and Manager.Task do all of it for the
// principal the lease was acquired for, through the hook New returns
// (run.go: the first Run of a lease attaches its runner once in this
// process and later ones reuse it). Attach and Start stay for berth's own
// tests and the runner-based probe (the probe scope); Run on a lease
// attached that way uses that runner's session.
//
// Principals, hooks and handles: every exported method of the Controller
// that acts for someone takes the acting authz.Principal right after its
// context and asks the Authorizer (Close, ServeHTTP, where runners
// authenticate with tickets and tokens, and ConnectedSessions and
// Admission, pure reads of this process's own connections, are the
// exceptions). New(signer, leases, secrets, opts)
// takes its required collaborators and the host's SecretResolver hook as
// arguments and returns the lease manager's hook, a leasehook.TaskStopper,
// next to the Controller; berth.New wires them. The Attachment Attach
// returns is a handle: the authority Attach granted to its principal.
//
// The parts:
//
//   - Controller, Options, New, MintTicket and the resume tickets
//     Attach and Reattach mint (authorized through the host's
//     authz.Authorizer) and ServeHTTP (the "exchange" and "connect"
//     paths). A session records the ticket that created it and whether the
//     lease's holder minted it (Attach, or TicketRequest.Holder: only
//     for a lease acquired for a runner, whose release alone the lease
//     manager asks StopTasks about); a resume
//     ticket's exchange rejoins its session and hands the runner the
//     session's state key again.
//
//   - The controller's view of the lease records
//     (New's LeaseReader): a ticket is minted for an active
//     lease only, bound to its recorded company; a connect and every token
//     renewal read the session's lease, so a session lives no longer than
//     its lease on every replica (a renewed token never outlives it; a live
//     connection whose lease ended is closed as unauthorized);
//     and a session or lease the principal may not read is refused as a
//     missing one (errcode.ErrNotFound, one text), "denied" kept for what it can
//     see.
//
//   - One connection: authentication before Accept, the session's
//     one live connection claimed in the Store before the upgrade (a second
//     connection is refused, 409 session_connected, on any replica; the
//     heartbeat renews the claim, which lasts three Options.Heartbeat,
//     with those of the other connections answered meanwhile, in one
//     store write: Store.RenewConnections), the subprotocol, the read
//     limit, hello / welcome, one reader and one writer and the Ping
//     heartbeat.
//
//   - An idle connection holds one goroutine, its reader's, and small
//     buffers (issue 55): the HTTP handler sets the upgraded connection
//     up and returns, and its reader runs on in a goroutine of its own
//     (runConn), so that the HTTP server's state of the connection is
//     garbage, with read and write buffers of 1 KiB (connBufs) instead
//     of the server's 4 KiB each; the reader takes a frame buffer from a
//     pool only while it reads a frame; the intake
//     goroutine runs only while records flow (the reader starts it, it
//     ends once it stored what was handed over); the writer runs only
//     when woken or at its own deadline, in a goroutine that ends with
//     the run (startWriter), a wakeup during a run making it run again;
//     and the heartbeat is a timer that starts a goroutine for each ping,
//     which drops its connection, and only that one, when the runner does
//     not answer within DeadAfter. A lease's ingress server serves
//     HTTP/1 only, and its accept loop is a goroutine a lease.
//
//   - Idle connections cost the store nothing of their own (issue 55):
//     a writer reads its session's journal only when woken, by a command
//     journaled in this process, by the controller's one journal poller
//     (pollJournal, conn.go: once per Options.Poll one read,
//     Store.SessionsWithCommandsAfter, names the connected sessions with
//     commands their writer has not sent, which another replica
//     journaled), by stored events to ack, or by its own renewal time.
//
//   - Admission control (admission.go, issue 55): a ceiling on the
//     runner connections this process serves at once
//     (Options.MaxSessions, default 10,000) and on the output bytes it
//     holds in flight over all of them (Options.MaxInflightBytes, default
//     1 GiB: read from runners and not yet acked); zero takes the
//     default, a negative value means no ceiling. Past either, a new
//     connection is refused after its token and session are checked and
//     before the store's claim and the upgrade: HTTP 503, code
//     prpwire.CodeAtCapacity, Retry-After, counted (Admission:
//     RefusedSessions, RefusedBytes, with the current Sessions and
//     InflightBytes). It is a passing refusal: the runner backs off and
//     retries (only 401 and 403 are final for it), and is admitted once a
//     connection ends or the bytes are acked. Bytes are not refused on a
//     connection already admitted: its runner's window
//     (max_unacked_bytes) bounds what it sends before the writer's ack,
//     which comes only after the store and the sync, so a store that
//     falls behind holds the connected runners back (back-pressure) and
//     the ceiling keeps new ones out, instead of every session's latency
//     growing with their number.
//
//   - The handles a host runs tasks with. Attach returns an
//     *Attachment (Reattach finds one again by session); its Start(ctx, p,
//     TaskSpec) journals task.start under a command id derived from the
//     task id (TaskSpec.CommandID for a caller's own), so starting the
//     same task again runs nothing twice, and returns a *Task: Wait
//     feeds the spec's writers in order and returns the prp.Exit (a Wait
//     cut short goes on where it stopped), Output(ctx, from) reads the
//     chunks after an event seq (a follower that reconnects misses
//     nothing), Stop returns the runner's Proof with Evidence
//     runner_attested: checked for completeness, but the runner's word
//     (PRP-6), which never ends a lease alone. The handles take no
//     principal: they carry the authority of the one they were made for,
//     as an os.File carries the access granted when it was opened.
//
//   - Dispatch and wait under the handles: commands on a
//     contiguous seq with idempotent ids, scoped to the session's lease
//     and run.
//
//   - Event intake (stored durably, acked cumulatively after the
//     write), bounded (issue 22): output only of tasks whose task.start is
//     journaled in the session, none on a probe session, up to the task's
//     output_limit and the session's caps (Options.MaxSessionOutput,
//     MaxSessionEvents); past a limit events are acked and discarded, the
//     cut counted in the store (OutputUsage, stored after each batch: the
//     caps hold across reconnects and replicas; a discarded event's ack is
//     the session usage's seq) and marked (prp.Output.Truncated,
//     prp.Exit.Truncated); follow (subscribe, backfill, dedupe) under
//     Task.Wait; Output and Task.Output (from an offset, a bounded read
//     at a time).
//
//   - The output bytes: chunk files under Options.DataDir; the store
//     holds their index (OutputRef).
//
//   - events_lost: a runner's resume cursor that shows
//     events it no longer has and the store never got is recorded
//     (an EventEventsLost record) and fails the session's commands.
//
//   - The Store interface (sessions, command
//     journal, event metadata) and NewMemoryStore. controllertest holds the
//     Store conformance suite; store/sqlite and store/postgres the SQL stores.
//
//   - A task's secrets (prp.SecretUse references in
//     task.start): Start asks the host's SecretResolver (New's secrets)
//     to check them with the principal, before journaling; the writer
//     resolves the values when it delivers the command and sends them in a
//     TypeSecrets frame right before it, at most once per command: the
//     delivery is claimed in the store (Store.ClaimSecrets, a
//     compare-and-swap) before the frame is sent, so no reconnect (even one
//     asking from command seq 0) and no other replica sends it again; never
//     for a command that has a result; never stored, logged or echoed. A
//     resolution that fails at delivery goes to the runner as a
//     code, and the runner refuses the command (nothing runs).
//
//   - Attach, which connects a leased sandbox's runner: it
//     installs the runner the lease records (lease.Lease.Runner, through
//     leasehook.HostRunner), serves the controller
//     on the sandbox's ingress for as long as the lease lasts, mints a
//     task or probe ticket (authorized; a resume ticket when the holder's
//     own session exists and its runner is gone), launches the runner and
//     waits for the hello on the session of that ticket (never another
//     session of the lease); without one by ctx's deadline, its error
//     names the sandbox and carries the printable end of the runner's log
//     (RunnerIngress.LogTail, maxAttachLogTail); RunnerSetFromFiles
//     (runnerbin.Spec of each binary, keyed by its architecture).
//
//   - The controller's hook for the lease manager, the
//     leasehook.TaskStopper that New returns next to the Controller (an
//     unexported type: no method of the Controller stops a lease's tasks
//     for no principal): StopTasks stops and checks every task of every
//     holder session of a lease before its sandbox is released (sessions
//     the holder did not mint are not waited on; tasks already proven
//     stopped are not asked again; the report is runner_attested, so the
//     lease still needs the sandbox's or the host's own proof), LeaseEnded
//     closes the lease's ingress server, and StartPoolRunner connects the
//     runner of a starting warm-pool member.
//
//   - Warm-pool runners (lease's runner pools, pool.go): a member's
//     runner connects on a session of authz.InstanceCompany for the run
//     prp.PoolRunPrefix plus the member's id, minted for the member's
//     record by the lease manager's hook only (MintTicket refuses a member
//     with errcode.ErrConflict). Such a session runs no command: dispatch
//     refuses one with prp.ErrScopeDenied for every principal, and its
//     writer sends none. The Attach of the lease that adopted the member
//     takes the session over (Store.HandOverSession: once, in one
//     conditional update, to the lease's company and run) and, when the
//     runner is connected here, returns without launching anything. The
//     connection's writer, on whichever replica the runner is connected,
//     renews the token with the new claims in a TypeToken that names the
//     run before it sends any command, and the runner takes a renewal that
//     changes its run only from a pool run. A runner that was disconnected
//     at the hand-over reconnects with its pool token, which connect
//     accepts for the handed session only, and is renewed the same way; one
//     that is gone is relaunched with a resume ticket, as for any lease.
//     After a restart the lease manager's pool pass has the runners of the
//     pooled members reconnect to the new process (ReconnectPoolRunner:
//     the ingress served here, a runner launched with a resume ticket,
//     which nudges the member's live runner to reconnect and exits, or
//     resumes the session when that runner is gone).
//     Runs that start with prp.PoolRunPrefix are no principal's: Attach and
//     MintTicket refuse them (errcode.ErrInvalid), and no session is handed
//     over to one. The calls that authorize once and then wait (Task.Wait,
//     the result wait) refuse a session of the instance, so a wait
//     authorized before a hand-over never reads the adopting company's
//     events after it. When a runner connection ends and its session's
//     lease is over, this process's ingress server of the lease is closed
//     (a member retired, or its adopter released, on another replica).
//     A resume ticket Attach relaunched a runner with is used up once the
//     session is connected again, whichever runner joined (a relaunched
//     runner that found its state directory busy exchanges nothing).
//
// Durability of events, what is synced when: the connection's reader
// writes each event's output bytes to the sink as it arrives (not synced)
// and hands its metadata to the connection's intake (a goroutine while
// records flow), which puts
// every event read while its previous write ran (at most maxEventBatch) in
// the Store at once: with a GroupIntaker Store (the SQL stores) in one
// group commit with the batches other connections handed over meanwhile
// (one transaction for many sessions' events, their results' commands
// and usage), else one PutEvents transaction if the Store is an
// EventBatcher, else PutEvent by PutEvent, then the results' commands,
// then the usage; durable when that returns, as the Store documents, and
// only then counted as stored. A batch handed to the group commit is
// waited for even if its connection ends meanwhile, and the writes after
// the events' are done all the same: a runner is welcomed back from the
// last event the store holds and never sends a stored event again, so a
// result stored without its command's completion would leave a Wait for
// it forever (issue 55). A crash between those writes leaves events after
// the session's stored usage: the next connection of the session
// completes their results before it reads an event (newAccounting).
// A stored batch wakes the waiters and followers
// of its own session only. The connection's writer acks: it reads
// the highest stored seq, calls outputSink.Sync (fileSink: one fsync of the
// session's current chunk file; a full chunk file was synced before the
// next was opened), and only then acks that seq. A sync runs while the
// reader stores on, so every sync covers all the events stored during the
// previous one; and the writer acks in batches (ackPolicy): at most 10 ms
// (ackDelay) after it saw the first unacked event stored, or at once when
// the stored output unacked reaches an eighth of the runner's window
// (max_unacked_bytes), so that a stream makes one fsync and one ack per
// batch rather than per chunk or two (issue 55), and the runner's window
// never waits longer than that. Output events from a runner granted
// binary output arrive as binary frames, parsed once into a reused
// buffer that goes to the sink without a copy.
package controller
