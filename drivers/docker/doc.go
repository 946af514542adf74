// Package docker is the berth driver for a Docker engine: every lease is a
// hardened container, and the provider lease id is the container id.
//
//	d := docker.New(nil) // the engine of DOCKER_HOST, else the socket
//	cfg, err := d.Schema().Normalize(map[string]any{
//		"image":  "ghcr.io/acme/agent@sha256:...", // pinned: qualifies
//		"memory": "2g", // network "none" unless set
//	})
//	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: id})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"make"}})
//	r, err := sb.Release(ctx, drivers.Destroy) // the engine confirms
//
// New and the driver's Acquire are the entry points. Beyond Exec, the sandboxes
// stream commands (drivers.StreamExecer), open PTY sessions
// (drivers.Terminal), report their live image identity and capture
// templates; the driver resumes, lists and destroys containers by id and
// hosts berth's runner. The sections below say how.
//
// # Config
//
// host (identity) is the engine, defaulting like the Docker CLI to
// DOCKER_HOST, else the platform's default socket (Docker CLI contexts are
// not read); TLS comes from DOCKER_CERT_PATH / DOCKER_TLS_VERIFY. image
// (identity, the schema's ImageField) is the reference the sandboxes run;
// pin it as repo@sha256:... for qualification. registry_auth (secret) is
// "username:password" or a bare bearer token. The knobs are pull_policy,
// cpus, memory (default 1g, swap disabled), pids_limit (default 512),
// network (default "none": no network at all; "host" and "container:..."
// are refused), ports (published only on 127.0.0.1), readonly_rootfs
// (default false; when set, /tmp and the workdir, which must not be "/",
// are the only writable places: empty tmpfs mounts owned by the user knob's
// uid, exec so that code built there runs, nosuid and nodev), user (numeric
// "UID[:GID]" for the container and every command; default: the image's
// user, root for most images), workdir, startup_timeout and
// capture_repository; labels (metadata) are extra container labels. env is
// a secret map (config.KindSecretMap): the catalog keeps each value in the
// secret store, and the driver hands the values to every exec (Exec, Start,
// OpenTerminal; a command's own env wins), never to the container's
// create-time environment, so docker inspect and captured templates never
// show them. The schema's field docs (its Schema) say what each knob
// trades.
//
// runtime (identity, no default: absent, the engine's default runtime, and
// the config's fingerprint as before) names the OCI runtime: "runsc" runs
// the container under gVisor, and the driver then declares isolation
// gvisor (drivers.IsolationDeclarer; container otherwise). Under runsc the
// network must be "none" (validation refuses another, naming the field:
// the engine's runsc runs with --network=none, and a start runsc refuses
// leaves its processes behind). Acquire and Resume check the runtime the
// engine reports for the container (HostConfig.Runtime) before handing it
// out; Acquire removes a container that runs under another.
//
// The provider health (drivers.HealthChecker) of a config is its engine's
// /_ping and, when the config sets a runtime, the runtimes the engine's
// info lists: a runtime it does not list is drivers.ErrUnavailable, the
// sentence naming the runtimes it has, so the saved environment shows
// unavailable and the gate refuses it before anything is created. Its
// Endpoint is the engine host followed by " (runtime NAME)": configs of
// one engine under different runtimes keep a measurement each. Validation
// does no I/O (CAP-1): a runtime the engine lacks is saved, and an Acquire
// that reaches the engine anyway is refused by its create, which makes
// nothing.
//
// # Acquire
//
// A pinned digest is pulled only when the engine lacks it; a tag follows
// pull_policy (default: pull when missing, as the Docker CLI does). A missing
// image is drivers.ErrImageNotFound naming the reference. The container is
// created from the image ID the reference resolves to. For a pinned
// reference the driver keeps, per engine, the image ID its first Acquire
// resolved (by inspect, and pull when missing), and later Acquires create
// from it without an image inspect: the pin names content, so the ID
// cannot change while the image exists; when the image was removed, create
// answers "No such image" and the driver resolves the reference again
// (inspect, pull) and creates once more. The container inspect that waits
// for the container to run checks that it runs that image ID; another one
// is removed and refused. A tag is resolved on every Acquire. So a lease
// (Acquire, Exec of "true", Release with Destroy) is 7 Engine API calls:
// create, start, inspect; exec create, exec start, exec inspect; remove.
// The container is created with all capabilities dropped,
// no-new-privileges, pids, memory and optional CPU limits, never privileged,
// never in the host's network, IPC or PID namespace, docker-init as PID 1
// (it reaps orphans of killed commands), and an idle sh loop as its main
// process (the image needs sh and sleep). It carries the request's labels,
// the config's labels, berth.managed=true and berth.lease=<lease id>, so that
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
// exports BERTH_EXEC_ID=<random id>, inherited by every descendant, and
// execs the command in its own place: the engine starts each exec'd
// process as the leader of its own session and process group, so the
// command leads its group (no fork, no setsid: under gVisor each process
// start is costly). Cancellation runs a second exec that sends SIGKILL to
// every process carrying the marker and to the groups they lead, and repeats
// until the engine reports the exec ended and no marked process is left;
// Exec then returns an error wrapping the context's error. Process.Signal
// sends other signals the same way. The image needs sh, grep and kill.
// The kill execs of one container run one at a time: under gVisor
// (Debian's runsc 0.0~20221219) two processes scanning /proc while
// processes exit end the whole sandbox (the container exits with status
// 2 and attached execs never end), so a signal waits for the kill before
// it.
// Limits: a process that clears its environment and leaves the process
// group, or runs as another user (the container's root has no CAP_KILL),
// escapes the kill; stopping or destroying the container ends it.
//
// A warm sandbox (drivers.AcquireRequest.Warm: a warm-pool member, idle
// until it is handed out) on an engine reached through a unix:// socket
// has its first command's exec started within Acquire (a tcp://
// connection idling until then could be dropped silently by the
// network). Starting an exec is the engine's dearest step of a command
// (under runsc about 60 ms on the test machine, the runtime's binary run
// twice per exec, against about 10 for a primed exec to run its
// command). The primed exec is a sh, marked like the wrapper, that reads
// one line from its stdin and evals it: the command's environment and
// marker exported, its arguments set, the command execed in the sh's
// place, so its output, status and kill are an exec's as above; the rest
// of stdin is the command's (closed at once when it has none). Before the
// line is written the engine must report the exec running. It serves only
// a first command that nothing preceded: a terminal or a runner opened
// first closes it, as does a command it cannot carry exactly (another
// working directory, an environment variable name the shell treats
// specially, a NUL byte); those and every later command take the ordinary
// path, and a release closes an unused primed exec (its sh reads the end
// of its stdin and exits).
//
// # Release and receipts (LEASE-7)
//
// Keep reads the state back; Stop stops the container (it stays resumable by
// Resume) and confirms it no longer runs; Destroy force-removes it, and the
// engine's answer is the receipt's evidence: a 204 (the engine answers
// only after it deleted the container from the stores that inspect reads;
// moby daemon/delete.go, cleanupContainer) or a 404 "no such container".
// Only a 409 (another removal in progress) or a transport error after the
// request may have arrived leaves the outcome open; then the driver
// inspects until the engine answers "no such container" (and removes again
// if no removal is in progress). Destroy by id of a container that is
// already gone is the same confirmed receipt. List, Resume and Destroy only ever touch containers
// that carry berth.managed.
//
// A create whose answer never came (the context ended, the connection
// broke after the request was sent) may still have made its container,
// which no record names: Acquire then creates a container of the same
// name (unique to the attempt) itself; a conflict means the first create
// made or is making it, and it is removed by name once it exists; a
// success means it did not, and the one just made is removed.
//
// # Runner ingress (CapRunnerIngress)
//
// A container that will host berth's runner is acquired with
// AcquireRequest.Runner: Acquire checks that the binary has the spec's
// SHA-256 (a mismatch names the sha256 field) and, at creation, bind-mounts
// it read-only at /.berth/bin/berth-runner, bind-mounts
// read-only at /.berth/run a host directory that will
// hold the ingress socket, mounts a tmpfs owned by the user knob's uid
// (mode 1777 without it) at /.berth/state for the runner's
// state, and labels the container berth.runner=<sha256>. Nothing is copied
// (the binary is mounted; the state tmpfs stays noexec). The runner reaches
// the host over that unix socket, so it works with network "none" and sends
// no IP traffic; no network is added. HostRunner listens on the host side:
// Options.RunnerDir (default berth-docker-runner-UID in the temporary
// directory, 0700, owned by berth's user) holds one 0700 directory per
// container, whose 0711 "run" subdirectory is the mount, with the socket
// prp.sock (0666) in it; so a non-root container user can connect and no
// other user of the host can. The container cannot write in either mount.
// Endpoint is "unix:/.berth/run/prp.sock"; Launch uses
// driverkit.LaunchRunnerByExec (the image needs sh, mkdir, cat and mv;
// setsid where present), and LogTail reads the end of
// /.berth/state/runner.log with tail -c in the container
// (driverkit.RunnerLogTailByExec). A container acquired without a Runner
// refuses HostRunner with drivers.ErrUnsupported.
//
// This needs an engine that shares this host's filesystem: only a unix://
// host does (an engine behind a unix socket in a VM, such as Docker
// Desktop's, does not, and is not detected). For a tcp:// host the driver
// narrows runner_ingress away (its NarrowedBy, drivers.ConfigNarrower)
// and Acquire with a Runner is refused before the engine is contacted.
//
// Release closes the handle's open ingress; Destroy (and the driver's Destroy
// by id) removes the container's host directory once the engine confirms
// the container is gone. A stopped or kept container keeps its mounts and
// its directory: Resume reads them back from the engine, and its handle
// hosts the runner the container was created with. HostRunner with a spec
// of another SHA-256 is refused (drivers.ErrUnsupported naming sha256),
// as is a binary changed in place since creation; to run another runner,
// acquire a new container. A bind mount holds the file it was created with
// (its inode): replacing the host file by a rename does not change what
// the container runs.
//
// # Files (CapFiles)
//
// drivers.Files works under the config's workdir, on network none as on
// any network. Where the engine sees the files, it uses the Engine's
// archive API: PutArchive is CopyToContainer (the sandbox's user owns what
// it unpacks; the engine unpacks inside the container, so a link the task
// planted leads only into the sandbox), GetArchive is CopyFromContainer
// (a directory as DIR/., a link at the asked path as the link), its names
// rebased onto the path. The archive API does not see a tmpfs mounted in
// the container (the workdir and /tmp of a read-only root, the runner's
// state directory): there both run tar in the sandbox through exec (the
// image needs sh and tar; busybox's will do), and the stream is the
// sandbox's to forge. ReadDir always runs sh, stat and readlink through
// exec. A host unpacks what comes back with tarsafe.Extract.
//
// # Templates
//
// Capture commits the container (paused) to a new image labelled
// berth.template. Without capture_repository it stays in the engine and its
// identity is "berth.local/templates/NAME@<image id>": the
// engine's image ID is a content digest of the image config, immutable like
// a manifest digest but valid only on that engine; Acquire of such a
// reference looks the image up by ID and never pulls. With
// capture_repository the image is pushed there and its identity is the
// registry's manifest digest. DeleteTemplate removes it from the engine and,
// when pushed, from the registry, and returns a receipt only when both read
// back that it is gone (image inspect: not found; registry HEAD: 404); a
// template that is already gone is a confirmed receipt.
//
// DeleteTemplate never forces. The engine refuses (409) to remove an image
// that a container uses, running or stopped, made by this instance or by
// anyone else, that a child image is built on, or that another
// repository's tag names; DeleteTemplate then returns an error wrapping
// drivers.ErrInUse that names the template and the engine's reason, with
// nothing untagged and the registry untouched, and the caller retries once
// nothing uses it. A pushed capture also carries a berth.local tag, which
// the engine would otherwise count as a second repository: that tag is
// removed first, and only after the engine lists no container of the
// image. Untagged parent images are kept (noprune). A template pushed to
// capture_repository that the engine no longer has is pulled again by its
// digest on the next Acquire.
package docker
