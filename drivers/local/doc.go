// Package local is the host target: a driver that runs commands on the
// machine berth runs on (Kind host). Acquiring opens a session in a working
// directory; releasing ends the session and every process it started, never
// the host.
//
//	d := local.New(nil) // or drivers.NewRegistry(local.New(nil), ...)
//	cfg, err := d.Schema().Normalize(map[string]any{"workdir": dir})
//	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: id})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"make"}})
//	r, err := sb.Release(ctx, drivers.Destroy) // ends what it left
//
// New and its driver's Acquire are the entry points. Commands run through
// os/exec, each in its own process group; cancellation kills the whole
// group and WaitDelay keeps pipes held by grandchildren from hanging.
// Release kills what the session left running and confirms it through
// /proc. The driver declares exec, stream_exec, runner_ingress and files. A session's
// working directory is resolved at Acquire (symlinks evaluated) and is
// the default directory of its commands. A command inherits the host
// process's ignored signals, as every child does: a host started with
// SIGHUP or SIGINT ignored (under nohup, or as a background job of a
// shell without job control; Go keeps those two ignored) cannot end its
// commands with that signal.
//
// Files (drivers.Files) work on the host's file system under the
// session's working directory only, every operation through its os.Root:
// PutArchive unpacks with tarsafe.Extract (so a symbolic link the task
// planted is never followed out of the directory, and the host's archive
// may hold no absolute link), GetArchive packs a directory with
// tarsafe.Create and sends a link at the asked path as the link, and a
// path through a link that leaves the working directory is refused.
//
// Runner ingress (drivers.RunnerHost): HostRunner installs nothing; it
// checks that spec.Binary is a regular executable file whose SHA-256 is
// spec.SHA256 (refusing otherwise, naming the field) and opens a unix
// socket prp.sock in a directory of mode 0700 made in the temporary
// directory at the lease's first HostRunner, so every ingress of the lease
// has the same path. Launch starts the runner where it is through
// driverkit.LaunchRunnerByExec, detached in its own session, with a state
// directory per berth lease id in that directory, its environment marked
// (BERTH_HOSTED_RUNNER, inherited by its tasks); LogTail reads the end of
// the last launched runner's runner.log there (tail -c, through Exec).
// Closing the ingress stops no runner. Release with Stop or Destroy ends
// every marked process and every runner whose state directory is in that
// directory, found by its --state-dir= argument (a runner is not dumpable:
// unless berth runs as root it cannot read the runner's environment, but
// it can read its command line): SIGTERM, then SIGKILL; survivors make the
// receipt unconfirmed, although they left the session's process groups.
// Then it removes the directory.
//
// Stop evidence (PRP-6): Release's receipt is drivers.EvidenceTagScan
// (berth's own check of the session's process groups and of the runners'
// mark). Where the login account is root and the host has a writable
// cgroup2 mount, driverkit.LaunchRunnerByExec starts the runner, and so its
// tasks, in a cgroup of the lease's own, which the lease manager's release
// check kills, sees empty and removes (drivers.EvidenceCgroup). Without a
// cgroup, a task that double-forks and re-executes with a cleared
// environment (env -i) carries neither the lease's tag nor the runner's
// mark: it evades the tag scan and keeps running after the release, and
// the lease's receipt says so.
//
// Isolation: none between leases. Every local lease's commands and runner
// tasks run as the berth host process's own user, in reach of everything
// that user can read and write: the other leases' workspaces, runner state
// and processes, and berth's own files (a SQLite store file, envctl's key
// file, the output sink's files). Use the local driver for trusted work
// only; for agents, use a sandbox driver (Docker, Daytona), or SSH with an
// account per company or agent, with berth's data outside its reach.
package local
