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
//	sb, err := d.Acquire(ctx, config.Config{}, drivers.AcquireRequest{})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"make"}})
//	_, err = sb.Release(ctx, drivers.Destroy)
//
// Provider state lives in the Driver: sandboxes ("fake-1", ...) and their
// states, labels and images; tags and digests (AddImage, DefaultImage) and
// snapshots. The faults berth's own tests inject (deterministic and never
// sleeping), its call counts and its sandbox table are internal
// (internal/fakectl).
//
// Commands run in Go, never on the host, and the fake has no shell
// interpreter: it runs a command's argv. A handler of Options.Handlers runs
// first, found by argv[0], by its base name, or, for "sh -c SCRIPT ...",
// by the whole SCRIPT. Then come the built-ins, which are what berth
// itself sends: the platform detection script (answered from
// Options.Platform), the scripts a setup session of package templates runs
// (answered as a clean sandbox would: a file write succeeds and keeps
// nothing, there is nothing of berth's to remove, process 1 has an empty
// environment), the scripts of package workspace (a tree's facts and the
// removal of a workspace's directory, answered from the files below), true, false, echo [-n], uname (-s -n -r -v -m -o -a),
// cat (stdin, /etc/os-release, /etc/hostname), sleep (on the driver's clock),
// env, pwd, exit [N], ln -s TARGET NAME (a link in the sandbox's files), and sh -c of ONE such command: its words split with
// 'single' and "double" quotes, backslashes, $NAME, ${NAME} and $0..$9.
// Anything else (another program, a list, a pipeline, a redirection, a
// substitution) exits 127 with a message on stderr that names the handler
// to register, e.g.
//
//	fake: no handler for "make": register one in Options.Handlers["make"]
//
// Files (drivers.Files) are an in-memory tree per sandbox under its
// working directory: PutArchive unpacks into it, refusing an entry that
// leaves the directory, GetArchive and ReadDir read it, and no operation
// follows a symbolic link.
//
// The terminal is an echo shell that runs each line as sh -c LINE.
// HostRunner runs internal/runner in this process on a unix socket: the tasks
// that runner starts are the only host processes the fake starts. A task
// whose working directory is the sandbox's (none, or one under /root) runs
// in a temporary host directory that holds a copy of the sandbox's files,
// and what it changes there goes back into them when it exits, so that a
// task of Handle.Run sees and edits a workspace; a task given another
// directory runs in that directory of the host.
package fake
