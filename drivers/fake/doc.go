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
// Commands run in Go, never on the host (builtins.go): echo, printf, true,
// false, sleep (on Options.Clock, or until the context ends), uname
// (-s -n -r -v -m -o -a), ldd --version (in glibc or musl format, absent
// without a libc), cat (stdin, /etc/os-release, /etc/hostname), head,
// hostname, pwd, env, id, whoami, command -v, stty size (in a terminal) and
// sh, whose small subset is documented in shell.go: ";", newlines, "&&",
// "||", "|" (run one after the other), quoting, $VAR, $(...), assignments,
// redirections of fd 1 and 2 to /dev/null or to each other, exit, cd,
// export. Unknown commands exit 127 with "not found" on stderr.
// Options.Handlers run Go functions for any argv[0]. The reported platform
// comes from Options.Platform (platform.go).
//
// # Sandbox operations
//
// Release(Keep) leaves a sandbox running; Release(Stop) stops it (Resume
// starts it again); Release(Destroy) and Destroy remove it, with a
// confirmed receipt. The terminal is an echo shell that runs each line
// (stream.go); Capture saves a snapshot. HostRunner (runner.go) opens a
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
