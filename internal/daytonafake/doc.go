// Package daytonafake is a fake Daytona API and toolbox proxy for tests, whole:
// the daytona driver's own tests use it, and drivers/daytona/daytonatest
// wraps the little that hosts' tests need. It is an
// httptest server on 127.0.0.1 that keeps the real API's rules as read in
// Daytona v0.190.0 (apps/api/src/sandbox/services/sandbox.service.ts,
// sandbox.controller.ts, snapshot.service.ts, the API's exception filter,
// and the daemon's apps/daemon/pkg/toolbox/process/execute.go).
//
//	clk := clock.NewFake(time.Now())
//	srv, err := daytonafake.New(&daytonafake.Options{Clock: clk})
//	defer srv.Close()
//	snap, err := srv.CreateSnapshot("base:1.0", "debian:12.7")
//	cfg := map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey(),
//		"snapshot_id": snap.ID} // for daytona.New(nil)
//	srv.InjectFault(daytonafake.Fault{
//		Route: daytonafake.RouteCreateSandbox, Status: 503})
//	srv.Advance(time.Second) // due transitions finish; no sleeps
//
// New and Options make a server; Knobs set timing and failures, Fault
// injects error answers per route and call. The server keeps the sandbox
// state machine, the listing, the snapshot rules, a command runner and the
// terminals; Sandbox, Sandboxes, LookupSnapshot and Calls are what tests
// read back.
//
// Rules kept:
//
//   - Bearer API key on every route (401); X-Daytona-Organization-ID is
//     ignored, as the API ignores it for API keys (only its JWT strategy
//     reads it, apps/api/src/auth/jwt.strategy.ts). Error bodies are the
//     API's {path, timestamp, statusCode, error, message}, the toolbox's
//     {statusCode, message, code, path, method, timestamp} and the PTY
//     controller's {error}. Options.TLS serves https with an untrusted
//     certificate; Fault.Location answers a redirect.
//   - Sandboxes have state and desiredState. Create answers before the
//     sandbox is started (creating; the API's own 30 s wait is compressed
//     to what is already due) unless the start is immediate; a start that
//     fails at once answers 400 "Sandbox failed to start: <reason>" while
//     the errored sandbox exists. Start from stopped (then starting),
//     archived or archiving (then restoring) or paused (then resuming; VM
//     classes only, Pause is the control) answers with the state unchanged
//     and desired started; stop from started or paused; archive only from
//     stopped and not for ephemeral sandboxes; any action while
//     state != desiredState or while a change is pending is 409 "Sandbox
//     state change in progress"; actions on an errored sandbox are 400. A
//     stop of a sandbox with autoDeleteInterval 0 deletes it.
//   - Delete is soft: desiredState destroyed, the name freed, then 404 once
//     the transition finishes. Lookups go by id, then by name.
//   - Create takes the snapshot by name or, for a UUID, by id, and needs it
//     active; resources (cpu, memory, disk, gpu) are refused as the API
//     refuses them for snapshot creates; the sandbox reports the snapshot's
//     name. Sandbox names are unique (409).
//   - Snapshots: created pending, then active (Knobs.SnapshotDelay);
//     AgeSnapshot makes one inactive as the 14-day idle cron does, and a
//     create from it answers 400 "Snapshot X is inactive";
//     POST /snapshots/{id}/activate (UUID only, 10-minute cooldown after
//     the deactivation) makes it pending again. Ids are UUIDs; names are
//     unique (409); the image name needs a tag or digest and not ":latest"
//     (400), as the API checks imageName; a name must pass
//     IsSafeDisplayString and the API's name format (400); GET and DELETE
//     /snapshots/{id} find an id or a name (404 "Snapshot with name X not
//     found" otherwise); DELETE takes a UUID only (400) and makes the
//     snapshot removing, then gone (Knobs.StopDelay), whatever sandboxes
//     use it: they run on, and creates from it are refused. GET
//     /snapshots pages (page from 1, limit 1-200, default 100), filters by
//     a case-insensitive partial name and sorts by name, state, lastUsedAt
//     (default; the fake records no use, so it is null and the order falls
//     to createdAt descending) or createdAt, asc or desc (default desc);
//     a value out of range is 400.
//     POST /sandbox/{id}/snapshot (a name passing IsSafeDisplayString; the
//     sandbox started or stopped, 400, with no change pending, 409) copies
//     the sandbox's home directory into a new snapshot, saved active, and
//     sandboxes created from it start with a copy; with job-based runners
//     (default) the sandbox's state is restored before the snapshot is
//     saved (Knobs.SnapshotBeforeRestore: the older order), and a duplicate
//     name is not refused by the request: the save makes no snapshot. The
//     rules are those of v0.190.0 (commit 01c502bb1f1f): sandbox.service.ts
//     createSnapshotFromSandbox, snapshot.service.ts, snapshot.controller.ts,
//     the snapshot guards, utils/persist-snapshot-from-sandbox.util.ts and
//     managers/snapshot.manager.ts.
//   - List: GET /sandbox with JSON labels, limit 1-200, sort (default
//     lastActivityAt, which every toolbox request bumps) and order (default
//     desc), id as tie-breaker, and a cursor on the last item's sort value
//     and id, destroyed sandboxes left out.
//   - Toolbox execute runs the command for real, shaped by the sandbox's
//     daemonVersion (Knobs.DaemonVersion, default 0.190.0): from 0.156.0
//     fed to Knobs.Shell (default /bin/sh) on stdin, before split on spaces
//     and run without a shell; envs only from 0.167.0; before 0.155.0 an
//     omitted timeout is 360 s; Knobs.ReplayExecute runs it twice as the
//     proxy's replay does. It runs in a process group, in a per-sandbox
//     home directory (TMPDIR a per-sandbox tmp directory), stdout and
//     stderr combined: 400 on an empty command or a bad env name, 408 when
//     its timeout kills the group; like the daemon, a cancelled request
//     does not end the command; stopping or deleting the sandbox does.
//     Commands run as the test's user on the test's host: the fake isolates
//     directories, not privileges.
//   - PTY sessions: POST /process/pty starts /bin/sh -i -l on a real
//     pseudo-terminal (duplicate ids 409); the WebSocket
//     /process/pty/{id}/connect sends {"type":"control",
//     "status":"connected"}, then output as binary messages, takes input
//     messages, and closes with 1000 or 1011 and {"exitCode":N} when the
//     shell ends; resize after the end is 410; delete kills the session.
//     Several clients may attach; output goes only to the clients attached
//     when it is produced (nothing is replayed); sizes up to 1000; input
//     messages over 64 KiB end the connection.
//   - Files, one each way (fs/upload_file.go, fs/download_file.go): POST
//     /files/upload?path= saves the multipart field "file" (its parent
//     made, 400 on any failure), GET /files/download?path= answers the
//     file's bytes (links followed; 404 missing, 403 no permission, 400 a
//     directory or another error). A relative path is the daemon's
//     filepath.Abs of its working directory, which the fake takes to be
//     the sandbox's home. No modes, no links: trees go as one archive.
//
// Stricter than the real API, on purpose: unknown JSON fields in request
// bodies are refused with 400, so a client using a wrong field name fails
// instead of being silently ignored.
//
// Time: transitions finish when the server's clock passes their delay and
// enough reads happened (Knobs.StartDelay, StartPolls, StopDelay). With a
// *clock.Fake the test decides when, through Server.Advance; no sleeps.
package daytonafake
