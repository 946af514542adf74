// Package docker is the berth driver for a Docker engine: every lease is a
// hardened container, and the provider lease id is the container id.
//
// Start with New and Driver.Acquire (driver.go); the config fields and
// their kinds are in config.go, the container's hardening in container.go,
// image presence and the live image identity in image.go, commands in
// exec.go, release receipts, List and Destroy in release.go, templates in
// capture.go and PTY sessions in terminal.go.
//
// # Config
//
// host (identity) is the engine, defaulting like the Docker CLI to
// DOCKER_HOST, else the platform's default socket (Docker CLI contexts are
// not read); TLS comes from DOCKER_CERT_PATH / DOCKER_TLS_VERIFY. image
// (identity, the schema's ImageField) is the reference the sandboxes run; pin
// it as repo@sha256:... for qualification. registry_auth (secret) is
// "username:password" or a bare bearer token. The knobs are pull_policy,
// cpus, memory (default 1g, swap disabled), pids_limit (default 512),
// network (default "none": no network at all; "host" and "container:..."
// are refused), ports (published only on 127.0.0.1), readonly_rootfs
// (default false; when set, /tmp and the workdir, which must not be "/",
// are the only writable places: empty tmpfs mounts owned by the user knob's
// uid), user (numeric "UID[:GID]" for the container and every command;
// default: the image's user, root for most images), workdir,
// startup_timeout and capture_repository; labels (metadata) are extra
// container labels. env is a secret map (drivers.KindSecretMap): the catalog
// keeps each value in the secret store, and the driver hands the values to
// every exec (Exec, Start, OpenTerminal; a command's own env wins), never to
// the container's create-time environment, so docker inspect and captured
// templates never show them. The field docs in config.go say what each knob trades.
//
// # Acquire
//
// A pinned digest is pulled only when the engine lacks it; a tag follows
// pull_policy (default: pull when missing, as the Docker CLI does). A missing
// image is drivers.ErrImageNotFound naming the reference. The container is
// created from the image ID just checked, with all capabilities dropped,
// no-new-privileges, pids, memory and optional CPU limits, never privileged,
// never in the host's network, IPC or PID namespace, docker-init as PID 1
// (it reaps orphans of killed commands), and an idle sh loop as its main
// process (the image needs sh and sleep). It carries the request's labels,
// the config's labels, LabelManaged=true and LabelLease=<lease id>, so that
// Lister finds it for orphan sweeps (LEASE-9). req.Allocated is called with
// the container id between create and start (LEASE-2).
//
// # Image identity (IMG-3)
//
// ImageIdentity reads the container's image ID from the engine and reports
// that image's repo digest, never the configured reference: a tag moved to
// another image after the container started does not change what is
// reported, and a container started from the moved tag reports the new
// digest, which does not match the pinned one.
//
// # Commands
//
// docker exec has no kill. Each command runs under a small sh wrapper that
// starts it in its own session and process group (setsid, when the image
// has it) with BERTH_EXEC_ID=<random id> in its environment, inherited by
// every descendant. Cancellation runs a second exec that sends SIGKILL to
// every process carrying the marker and to the groups they lead, and repeats
// until the engine reports the wrapper ended and no marked process is left;
// Exec then returns an error wrapping the context's error. Process.Signal
// sends other signals the same way. The image needs sh, grep and kill.
// Limits: a process that clears its environment and leaves the process
// group, or runs as another user (the container's root has no CAP_KILL),
// escapes the kill; stopping or destroying the container ends it.
//
// # Release and receipts (LEASE-7)
//
// Keep reads the state back; Stop stops the container (it stays resumable by
// Resume) and confirms it no longer runs; Destroy force-removes it and
// confirms that the engine no longer knows it ("inspect: no such
// container"). Destroy by id of a container that is already gone is the same
// confirmed receipt. List, Resume and Destroy only ever touch containers
// that carry LabelManaged.
//
// # Templates
//
// Capture commits the container (paused) to a new image labelled
// LabelTemplate. Without capture_repository it stays in the engine and its
// identity is "berth.local/templates/NAME@<image id>" (LocalRegistry): the
// engine's image ID is a content digest of the image config, immutable like
// a manifest digest but valid only on that engine; Acquire of such a
// reference looks the image up by ID and never pulls. With
// capture_repository the image is pushed there and its identity is the
// registry's manifest digest. DeleteTemplate removes it from the engine and,
// when pushed, from the registry.
package docker
