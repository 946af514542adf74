// Package daytona drives Daytona sandboxes through Daytona's REST API
// (v0.190.0: libs/api-client-go/api/openapi.yaml) and the toolbox API
// reached through each sandbox's toolbox proxy
// (libs/toolbox-api-client-go/api/openapi.yaml). It is a focused client of
// the documented endpoints written for berth; Daytona's Go client is not
// used.
//
//	d := daytona.New(nil)
//	cfg, err := d.Schema().Normalize(map[string]any{
//		"api_url":     "https://app.daytona.io/api",
//		"api_key":     key,    // a secret, scrubbed from every error
//		"snapshot_id": snapID, // a UUID: names are refused (QUAL-6)
//	})
//	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: id})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"make"}})
//	r, err := sb.Release(ctx, drivers.Destroy) // read back: 404
//
// New and the driver's Acquire are the entry points. The HTTP client maps errors
// and keeps the transport safe (redaction, token origins, redirects, TLS);
// retries run on internal/retry. A fake Daytona server that keeps the real
// API's rules (internal/daytonafake) runs the driver and the conformance
// suite in the tests; drivers/daytona/daytonatest is its small public face
// for hosts' tests.
//
// # Covered
//
//   - Auth: bearer API key (config api_key, a secret), optional
//     X-Daytona-Organization-ID (organization_id), which Daytona reads only
//     for JWTs: with an API key it does nothing, and the driver never relies
//     on it for scoping (it warns when a sandbox belongs elsewhere).
//   - Transport safety: api_url must be https unless its host is loopback;
//     redirects that change scheme, host or port are refused; the key goes
//     only to the configured API origin or an https toolbox proxy; a TLS
//     verification failure is drivers.ErrTLSUnverified (tls_unverified),
//     never retried; every answer is read up to a bound (8 MiB for the API,
//     about three times the output limit for an exec) and a longer one
//     fails; provider text is scrubbed of every run of 8 or more bytes of
//     the key before it is shortened.
//   - Sandboxes: POST /sandbox from a snapshot id with name, labels,
//     target, autoStopInterval, autoArchiveInterval, autoDeleteInterval
//     (never env: the config's env is a config.KindSecretMap whose values
//     go with each command's envs, so the API never shows them);
//     GET /sandbox/{id}; GET /sandbox?labels=...&sort=createdAt&order=asc
//     &cursor=... (cursor pages of ListSandboxesResponse; the API's default
//     order, by last activity, moves sandboxes during a walk; the list is
//     eventually consistent, so a sandbox missing from one walk is found by
//     the next); POST /sandbox/{id}/start (also resuming paused VM
//     sandboxes) and /stop; DELETE /sandbox/{id};
//     POST /sandbox/{id}/snapshot (Capturer);
//     GET /sandbox/{id}/toolbox-proxy-url when a sandbox lacks
//     toolboxProxyUrl.
//   - Snapshots: GET /snapshots/{id} (the answer must carry that id: the
//     endpoint also matches names), DELETE /snapshots/{id}
//     (TemplateDeleter), POST /snapshots/{id}/activate for a snapshot
//     Daytona marked inactive after 14 idle days (config
//     reactivate_snapshot, default true; false, or a refused activation,
//     is drivers.ErrImageInactive, code image_inactive). An inactive
//     snapshot keeps its id, so it does not change a sandbox's identity.
//     Capture waits for the captured snapshot itself to be active: runners
//     restore the sandbox's state before or after saving it. A sandbox on
//     its way to started or stopped (another capture's snapshotting) is
//     waited for before the capture is asked; one resting elsewhere
//     (paused, error, archived) fails at once, naming its state.
//   - Toolbox: POST {toolboxProxyUrl}/{sandboxId}/process/execute
//     ({command, cwd, envs, timeout} -> {exitCode, result}), shaped for the
//     sandbox's daemonVersion (a command's own env vars inline below
//     0.167.0 or when no version is reported, where a non-empty config env
//     is refused with drivers.ErrUnsupported naming the version rather than
//     inlined or dropped; the script through sh -c below 0.156.0, an
//     explicit time limit below 0.155.0); PTY sessions (Terminal): POST
//     /process/pty {id, cwd, envs, cols, rows}, the WebSocket
//     /process/pty/{id}/connect (a text control message "connected", output
//     as binary messages, keystrokes as messages, the exit code in the
//     close frame's JSON reason), POST /process/pty/{id}/resize, DELETE
//     /process/pty/{id}.
//   - Files (drivers.Files): the toolbox moves one file each way (POST
//     /files/upload?path= with the multipart field "file", GET
//     /files/download?path=), without modes or links, so a tree travels
//     as one tar archive in a directory of mktemp -d, unpacked or made by
//     the sandbox's tar through process/execute and removed after;
//     ReadDir runs sh, stat and readlink. Paths are confined to the
//     working directory (the commands' default cwd, pwd -P): a path whose
//     directory resolves outside it through a planted link is refused.
//   - Errors: 401/403 drivers.ErrAuth, 404 errcode.ErrNotFound, 408
//     drivers.ErrTimeout, 409 (state change in progress), 429 (Retry-After
//     honoured) and 5xx drivers.ErrTransient; an API that cannot be dialled
//     is drivers.ErrUnavailable (the provider's control plane), a toolbox
//     that cannot be dialled drivers.ErrUnreachable (the sandbox), a
//     certificate that fails verification drivers.ErrTLSUnverified.
//   - Health: CheckHealth reads the public GET /health and one sandbox of
//     the account (no allocation); Endpoint names the API URL and the API
//     key's secret reference. Messages name the operation, the sandbox or
//     snapshot id and the API host, never the key (which is also scrubbed
//     from provider text).
//   - Leases: Acquire calls AcquireRequest.Allocated as soon as the create
//     answers, then waits with backoff until the sandbox is started; error
//     and build_failed end the wait with the provider's errorReason, and a
//     deadline leaves the sandbox to finish starting, resumable by id
//     (Resumer starts stopped or archived sandboxes). Release(Stop) and
//     Release(Destroy) return receipts confirmed by reading the sandbox
//     back (stopped, or 404 after the soft delete); Destroyer deletes by id;
//     Lister lists by labels. Sandboxes carry the label berth.lease-id.
//   - Retries: transient failures are retried with jittered exponential
//     backoff inside the caller's deadline; no retry starts that could not
//     finish before it (LEASE-3). Create is made idempotent by a unique
//     sandbox name: a retried create that meets the name conflict reads the
//     sandbox back by that name.
//
// # Qualification binding (QUAL-6)
//
// The config names the snapshot by id (a UUID; names are refused). Acquire
// reads the snapshot by id, creates by that id, and checks that the new
// sandbox reports that snapshot. The API reports a sandbox's snapshot by
// name, not id; since names are unique per organization, the driver binds
// by reading the snapshot by id and comparing its name with the sandbox's,
// and ImageIdentity repeats both reads on the live sandbox before reporting
// images.SnapshotIdentity("daytona", id). A deleted id is
// drivers.ErrImageNotFound before anything is created; it is never
// resolved by name to a replacement.
//
// # Template deletion
//
// DeleteTemplate (drivers.TemplateDeleter) deletes a captured snapshot by
// its id and returns a receipt only when the API answers 404 for it: it
// sends DELETE /snapshots/{id}, then reads the snapshot back, waiting
// within the caller's deadline while it is removing (the API drops the row
// in a cron, every 10 s). A snapshot that is already gone is a confirmed
// receipt too; a wait that ends first is an error, unconfirmed, and a
// later call finishes it. Daytona (v0.190.0, snapshot.service.ts
// removeSnapshot) deletes a snapshot whatever sandboxes were made from it:
// they run on, and new ones cannot be made from it
// (drivers.ErrImageNotFound). So DeleteTemplate never returns
// drivers.ErrInUse; berth's templates package deletes a template only when no
// live lease uses it.
//
// # Exec: combined output
//
// process/execute returns stdout and stderr combined. Exec keeps them apart
// honestly by running each command in a POSIX sh wrapper that redirects
// them to private files in the sandbox's TMPDIR (default /tmp) and prints
// both back in one framed, base64-encoded answer. The wrapper also applies
// the output limit inside the sandbox and feeds Command.Stdin (at most
// 8 MiB, embedded in the command). The sandbox image needs sh, head, base64
// and rm. Because the toolbox reports only an exit status, a command killed
// by a signal reports the shell's 128+n and Result.Signal stays empty. The
// toolbox does not end a command whose request was cancelled, so a
// cancelled Exec kills the command's process group through a second
// request. The wrapper runs under any POSIX shell and under zsh (the daemon
// picks zsh, then bash, then sh).
//
// # Exec: at least once
//
// Daytona's proxy replays a POST once after a stale-connection error, so a
// command may run twice, overlapping. Exec is at-least-once at this
// provider. The wrapper keeps each run's files apart, the kill request
// ends every run, and the probe's detection script only reads; commands
// that must not run twice must guard themselves.
//
// # Not covered
//
//   - Streaming sessions (/process/session and their logs): StreamExecer
//     is not implemented and not declared.
//   - Terminal.OpenTerminal with Argv: the toolbox always starts the login
//     shell, so the driver types "exec <argv>" as the first input.
//   - Runner ingress (preview URLs): not implemented, not declared;
//     Acquire with AcquireRequest.Runner is refused before any API call
//     (drivers.ErrUnsupported, naming runner_ingress).
//   - Sandbox resources (cpu, memory, disk, gpu): the API refuses them when
//     creating from a snapshot; they come from the snapshot.
//   - Archive, pause, resize, fork, backups, volumes, network settings,
//     preview URLs, file, git and LSP toolbox endpoints: not used.
//   - Snapshot creation from an image (POST /snapshots): the fake server
//     implements it for tests; the driver does not need it.
package daytona
