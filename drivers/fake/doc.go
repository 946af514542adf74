// Package fake is a complete in-memory provider and its driver, for tests and
// internal probes. It is a real driver: it passes the whole conformance suite
// (drivers/drivertest) and implements every optional interface.
//
// Start with New and Options (fake.go). Provider state lives in the Driver:
// sandboxes with provider ids ("fake-1", ...), states (starting, running,
// stopped, destroyed), labels and image identity; an image table of tags,
// digests and snapshots (images.go); call counters per operation; and
// injected faults (faults.go).
//
// # Config
//
// Fields: image (identity; "repo:tag", "repo@sha256:...", "snapshot:<id>"
// or "snapshot-name:<name>"; absent: DefaultImage), region (identity,
// default "local-1"), cpus (knob, default 1), startup_timeout (knob),
// api_key (secret; required when Options.APIKey is set) and notes
// (metadata). A tag resolves to its current digest at Acquire; an unknown
// digest, tag or snapshot id, or a deleted snapshot, fails with
// drivers.ErrImageNotFound naming the reference. A snapshot name resolves
// at each Acquire, so it is mutable.
//
// # Commands
//
// Commands run in Go, never on the host (exec.go), and the fake has no shell
// interpreter: it runs a command's argv. A handler of Options.Handlers
// runs first, found by argv[0], by its base name, or, for
// "sh -c SCRIPT ...", by the whole SCRIPT. Then come the built-ins, which
// are what berth itself sends: qualification.DetectScript (recognised by
// identity and answered from Options.Platform, platform.go), true, false,
// echo [-n], uname (-s -n -r -v -m -o -a), cat (stdin, /etc/os-release,
// /etc/hostname), sleep (on Options.Clock, or until the context ends), env,
// pwd, exit [N], and sh -c of ONE such command: its words split with
// 'single' and "double" quotes, backslashes, $NAME, ${NAME} and $0..$9.
// Anything else (another program, a list, a pipeline, a redirection, a
// substitution) exits 127 with a message on stderr that names the handler
// to register, e.g.
//
//	fake: no handler for "make": register one in Options.Handlers["make"]
//
// Tests that send scripts of several commands register them by their text.
//
// # Sandbox operations
//
// Release(Keep) leaves a sandbox running; Release(Stop) stops it (Resume
// starts it again); Release(Destroy) and Destroy remove it, with a
// confirmed receipt. The terminal is an echo shell that runs each line as
// sh -c LINE (terminal.go); Capture saves a snapshot. HostRunner (runner.go) opens a
// unix-socket ingress and runs prp/runner in this process: the tasks that
// runner starts are the only host processes the fake starts. Its log (the
// runner's slog text and the error it ended with) is kept in memory, the
// last drivers.MaxRunnerLogTail bytes, for LogTail.
//
// # Faults
//
// Fault injection is deterministic and never sleeps: fail the Nth call of
// an operation (FailNth, Inject), refuse a stop (RefuseStop), fake a stop
// (FakeStop), lose a sandbox (Lose), report a wrong image
// (ReportWrongImage), make starts slow on the injectable clock
// (Options.StartDelay, SetStartDelay), make the provider unhealthy
// (inject a fault for OpHealth: CheckHealth then fails with
// drivers.ErrUnavailable, see health.go). Calls and TotalCalls count
// operations; Sandboxes lists the provider's sandboxes for leak checks.
package fake
