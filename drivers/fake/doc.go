// Package fake is a complete in-memory provider and its driver, for tests
// and internal probes. It is a real driver: it passes the whole conformance
// suite (drivers/drivertest) and implements every optional interface.
//
//	d := fake.New(&fake.Options{Handlers: map[string]fake.HandlerFunc{
//		"make": func(ctx context.Context, inv fake.Invocation) (int, error) {
//			fmt.Fprintln(inv.Stdout, "built")
//			return 0, nil
//		},
//	}})
//	sb, err := d.Acquire(ctx, drivers.Config{}, drivers.AcquireRequest{})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"make"}})
//	d.FailNth(fake.OpDestroy, 1, nil) // the first destroy fails
//	_, err = sb.Release(ctx, drivers.Destroy)
//
// Provider state lives in the Driver: sandboxes with provider ids
// ("fake-1", ...), states (starting, running, stopped, destroyed), labels
// and image identity; an image table of tags, digests and snapshots; call
// counters per operation; and injected faults.
//
// # Config
//
// Fields: image (identity; "repo:tag", "repo@sha256:...", "snapshot:<id>"
// or "snapshot-name:<name>"; absent: DefaultImage), region (identity,
// default "local-1"), cpus (knob, default 1), startup_timeout (knob),
// api_key (secret; required when Options.APIKey is set) and notes
// (metadata). A tag resolves to its current digest at Acquire, and a
// snapshot name at each Acquire, so it is mutable; an unknown digest, tag
// or snapshot, or a deleted one, fails with drivers.ErrImageNotFound naming
// the reference. DeleteTemplate refuses a template that a sandbox not yet
// destroyed was created from (drivers.ErrInUse).
//
// # Commands
//
// Commands run in Go, never on the host, and the fake has no shell
// interpreter: it runs a command's argv. A handler of Options.Handlers runs
// first, found by argv[0], by its base name, or, for "sh -c SCRIPT ...",
// by the whole SCRIPT. Then come the built-ins, which are what berth
// itself sends: qualification.DetectScript (recognised by identity and
// answered from Options.Platform), true, false, echo [-n], uname (-s -n -r
// -v -m -o -a), cat (stdin, /etc/os-release, /etc/hostname), sleep (on
// Options.Clock, or until the context ends), env, pwd, exit [N], and sh -c
// of ONE such command: its words split with 'single' and "double" quotes,
// backslashes, $NAME, ${NAME} and $0..$9. Anything else (another program,
// a list, a pipeline, a redirection, a substitution) exits 127 with a
// message on stderr that names the handler to register, e.g.
//
//	fake: no handler for "make": register one in Options.Handlers["make"]
//
// The terminal is an echo shell that runs each line as sh -c LINE.
// HostRunner runs prp/runner in this process on a unix socket: the tasks
// that runner starts are the only host processes the fake starts.
//
// # Faults
//
// Fault injection is deterministic and never sleeps: fail the Nth call of
// an operation (FailNth, Inject), refuse a stop (RefuseStop), fake one
// (FakeStop), lose a sandbox (Lose), report a wrong image
// (ReportWrongImage), make starts slow on the injectable clock
// (Options.StartDelay, SetStartDelay), make the provider unhealthy (a fault
// for OpHealth). Calls and TotalCalls count operations; Sandboxes lists the
// provider's sandboxes for leak checks.
package fake
