// Package daytonatest is a fake Daytona API and toolbox proxy for tests: an
// httptest server on 127.0.0.1 that keeps the real API's rules as read in
// Daytona v0.190.0 (apps/api/src/sandbox/services/sandbox.service.ts,
// sandbox.controller.ts, snapshot.service.ts, the API's exception filter,
// and the daemon's apps/daemon/pkg/toolbox/process/execute.go).
//
// Start with New and Options (server.go); Knobs set timing and failures,
// Fault injects error answers per route and call. sandboxes.go holds the
// sandbox state machine, snapshots.go the snapshot rules, toolbox.go the
// command runner, pty.go the terminals, inspect.go what tests read back.
//
// Rules kept:
//
//   - Bearer API key on every route (401); a foreign
//     X-Daytona-Organization-ID is 403. Error bodies are the API's
//     {path, timestamp, statusCode, error, message} and the toolbox's
//     {statusCode, message, code, path, method, timestamp}.
//   - Sandboxes have state and desiredState. Create answers before the
//     sandbox is started (creating; the API's own 30 s wait is compressed
//     to what is already due) unless the start is immediate; a start that
//     fails at once answers 400 "Sandbox failed to start: <reason>" while
//     the errored sandbox exists. Start from stopped (starting) or archived
//     (restoring); stop only from started; archive only from stopped and
//     not for ephemeral sandboxes; any action while state != desiredState
//     or while a change is pending is 409 "Sandbox state change in
//     progress"; actions on an errored sandbox are 400. A stop of a sandbox
//     with autoDeleteInterval 0 deletes it.
//   - Delete is soft: desiredState destroyed, the name freed, then 404 once
//     the transition finishes. Lookups go by id, then by name.
//   - Create takes the snapshot by name or, for a UUID, by id, and needs it
//     active; resources (cpu, memory, disk, gpu) are refused as the API
//     refuses them for snapshot creates; the sandbox reports the snapshot's
//     name. Sandbox names are unique (409).
//   - Snapshots: ids are UUIDs; names are unique (409); the image name needs
//     a tag or digest and not ":latest" (400), as the API checks imageName;
//     GET /snapshots/{id} matches a name or an id; delete is removing, then
//     gone. POST /sandbox/{id}/snapshot copies the sandbox's home directory
//     into a new snapshot, and sandboxes created from it start with a copy.
//   - List: GET /sandbox with JSON labels, limit 1-200 and opaque cursors,
//     newest first, destroyed sandboxes left out.
//   - Toolbox execute runs the command for real with /bin/sh in a process
//     group, in a per-sandbox home directory (TMPDIR a per-sandbox tmp
//     directory), stdout and stderr combined: 400 on an empty command or a
//     bad env name, 408 when its timeout kills the group; like the daemon,
//     a cancelled request does not end the command; stopping or deleting
//     the sandbox does. Commands run as the test's user on the test's host:
//     the fake isolates directories, not privileges.
//   - PTY sessions (pty.go): POST /process/pty starts /bin/sh -i -l on a
//     real pseudo-terminal (duplicate ids 409, sizes below 1000); the
//     WebSocket /process/pty/{id}/connect sends {"type":"control",
//     "status":"connected"}, then output as binary messages, takes input
//     messages, and closes with 1000 or 1011 and {"exitCode":N} when the
//     shell ends; resize after the end is 410; delete kills the session.
//     The fake takes one client per session and keeps output produced
//     before it attached.
//
// Stricter than the real API, on purpose: unknown JSON fields in request
// bodies are refused with 400, so a client using a wrong field name fails
// instead of being silently ignored.
//
// Time: transitions finish when the server's clock passes their delay and
// enough reads happened (Knobs.StartDelay, StartPolls, StopDelay). With a
// *clock.Fake the test decides when, through Server.Advance; no sleeps.
package daytonatest
