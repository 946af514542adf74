// Package kubernetes is the berth driver for a Kubernetes cluster: every
// lease is a hardened pod, and the provider lease id is the pod's name.
//
//	d := kubernetes.New(nil)
//	cfg, err := d.Schema().Normalize(map[string]any{
//		"kubeconfig": kubeconfigYAML, // a secret; absent: in-cluster
//		"namespace":  "agents",
//		"image":      "ghcr.io/acme/agent@sha256:...", // pinned: qualifies
//	})
//	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: id})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"make"}})
//	r, err := sb.Release(ctx, drivers.Destroy) // NotFound read back
//
// New and the driver's Acquire are the entry points; config.go holds the
// schema, pod.go the pod, acquire.go the wait for it, exec.go and
// terminal.go the commands, release.go the release, list and destroy,
// files.go the files, health.go the provider health and the
// architecture. docs/kubernetes.md
// says what the credentials need (a namespaced Role) and what the driver
// leaves to the operator (Services, NetworkPolicy).
//
// # Config
//
// kubeconfig (secret) is a kubeconfig's YAML; without one the driver runs
// in-cluster (the service account of the pod berth runs in). Only inline
// data is accepted: exec and auth-provider plugins and file references
// (client-certificate, client-key, tokenFile, certificate-authority) are
// refused at validation, so that a saved environment never makes the
// berth host run a program or read a file. context picks a kubeconfig
// context; namespace (default "default") holds the pods. image (identity,
// the schema's ImageField) is the reference the pods run: pin it as
// repo@sha256:... for qualification; image_pull_policy is the container's
// (default IfNotPresent). The knobs are cpu_request, cpu_limit,
// memory_request, memory_limit (default 1Gi), runtime_class_name
// (identity), node_selector, tolerations (kubectl taint's form), labels
// (metadata, extra pod labels), run_as_non_root, user ("UID[:GID]"),
// readonly_rootfs (then /tmp and the workdir are emptyDir volumes),
// workdir and startup_timeout (default 2m). env is a secret map: its values
// go to each command on its standard input (below), never into the pod
// spec, a Kubernetes Secret, an exec request's URL, an event or a log.
//
// # The pod
//
// One container, the configured image, running an idle sh loop that
// exits on TERM (the image needs sh and sleep); restartPolicy Never; no
// service account token (automountServiceAccountToken false), no service
// links; capabilities drop ALL, allowPrivilegeEscalation false, never
// privileged, the RuntimeDefault seccomp profile; no host network, PID or
// IPC namespace and no host path; terminationGracePeriodSeconds 2. It
// carries the request's labels, the config's labels, berth.managed=true
// and berth.lease=<lease id>, so that List finds it for orphan sweeps.
//
// # Acquire
//
// Acquire creates the pod, hands its name to req.Allocated, and watches it
// until its container runs, within startup_timeout and the caller's
// deadline. A container the kubelet will not start (an image that cannot be
// pulled: drivers.ErrImageNotFound; a config error; a pod that ended)
// fails at once with the reason its status gives; a pod not scheduled or
// started in time fails with its status's reason and its latest warning
// event. A pod Acquire gave up on is deleted.
//
// # Runner ingress
//
// berth's runner runs in the pod with no network path from the pod to the
// host (the cluster may be remote): a pod acquired with
// AcquireRequest.Runner has an emptyDir at /.berth (only those: the
// kubelet's mount of an emptyDir adds about 250 ms to a pod's start),
// HostRunner copies the runner binary there through exec (a tar stream
// proven whole, as the files capability's) unless the file there already
// has the runner's sum, read in the pod at each HostRunner (sha256sum), and
// the ingress is internal/execrelay's: the runner binary's relay mode
// (berth-runner relay) listens on /.berth/run/prp.sock in the pod and
// carries each connection made to it over one streaming exec's stdin and
// stdout, through the API server, to the host, which serves the
// controller on them; a relay whose exec ends is started again, and the
// runner reconnects through it. The runner and the relay run as the
// container's user, the tasks' too: a task of that user can replace the
// socket or the binary in /.berth, as it can any file of its user (a
// binary replaced is copied again at the next HostRunner, but one
// replaced between that check and a launch runs; run the tasks as another
// user where that matters). Closing the ingress stops
// accepting; the relay ends once its connections have, and Release ends
// it with the pod.
//
// # Commands
//
// The API server's exec (client-go's SPDY executor, which the API server
// proxies to the kubelet as it is, falling back to WebSocket) takes an
// argv only; an exec whose stream breaks before its status is
// drivers.ErrTransient. Each command runs as
// "env BERTH_EXEC_ID=<id> sh -c WRAPPER DIR HASENV NONCE ARGV...": the
// wrapper reads the environment from standard input (NAME=VALUE lines,
// escaped, ended by an empty line) and changes to the directory. stdout
// and stderr stay apart; the exit status comes from the exec's status.
// Signals and cancellation run a second exec that signals every process
// carrying the marker and the groups they lead, as the Docker driver
// does; a cancellation repeats it until none is left and the stream has
// ended. The image needs env, sh, grep and kill (busybox will do), for
// the files tar, cat, stat, readlink, dirname and basename, and for the
// runner sha256sum.
//
// The exec can lose the end of a command's output when the command exits
// (see Files below), its status a success. So a command without
// Command.Stdin runs as the wrapper's child (its stdin /dev/null), and the
// wrapper proves the end: once the command has exited it writes an end
// mark (a NUL-framed nonce) to stdout and to stderr, and exits with the
// command's status only after the driver, having read both marks, closes
// the exec's stdin. The marks never reach the caller; an exec that ends
// without them (a cut stream, or a task that killed its wrapper) returns
// its result with an error wrapping drivers.ErrTransient: the command ran,
// its output may lack its end. The wrapper catches the signals
// Process.Signal sends and exits after the command. A command with
// Command.Stdin is exec'd in the wrapper's place and its stdin continues
// the exec's: its output's end is not proven (the files and the runner's
// streams prove theirs in-band).
//
// The terminal is a TTY exec with resize; with an environment to send it
// turns the TTY's echo off (stty) before reading it, so that no value is
// echoed.
//
// # Release and receipts
//
// Keep reads the pod back and leaves it running: Resume (capability
// reattach) reopens it by name from any process (another replica, a
// restarted host, a warm-pool member made by another process), waiting
// until it runs; a pod gone is not found, one being deleted or ended is an
// error. Stop and Destroy both delete the pod (a pod cannot be stopped and
// started again: reuse, and so the reusable lease policies, are not
// declared) and confirm only
// once a read answers NotFound: the kubelet stopped the containers and the
// API server removed the pod. A pod still there when the context ends (a
// finalizer, a node that does not answer) is an error naming what holds it:
// the lease stays pending_cleanup with that reason. Destroy by id does the
// same for a pod that carries berth.managed, and confirms one that is gone.
//
// # Files, image, isolation, health
//
// Files are tar streams through exec, as kubectl cp does
// (driverkit.ExecFiles), and each proves that it arrived whole. The exec
// can lose the end of a command's output when the command exits, its
// status a success (under load a 64 MiB archive came back cut short,
// through SPDY and WebSocket alike: the kubelet's copy of the output races
// with the exit). So GetArchive's stream must end with tar's
// end-of-archive marker (archive/tar alone takes an end at an entry's
// boundary for the archive's end), and its command, after tar, waits for
// its stdin to end, which the driver closes only once that marker has
// arrived: nothing is left on its way when the command exits. A listing
// (ReadDir) must end with an end record. PutArchive sends its archive up
// to the end-of-archive marker and closes the stdin; tar's status comes
// with the exec's status, which is not lost. A stream cut short is
// drivers.ErrTransient, never a success; a read (GetArchive before its
// first byte, ReadDir) is tried again, three tries. ImageIdentity reads the
// container status's imageID (a repository digest). EngineKernel reads
// the pod's node's kernel release, for the probe's isolation measurement
// (credentials that may not read nodes get none, and the probe says it did
// not measure). Isolation is gvisor
// for a runtime_class_name of "gvisor" or "runsc" (Acquire refuses such a
// class when it can read its handler and it is not runsc), container
// otherwise. CheckHealth reads /readyz, lists the namespace's berth pods
// and reviews (SelfSubjectAccessReview) each permission the driver needs:
// one denied makes the environment unavailable, the sentence naming it.
// RunnerArch reads the nodes' kubernetes.io/arch (or the node selector's).
// Template capture is not a pod operation and is not declared.
package kubernetes
