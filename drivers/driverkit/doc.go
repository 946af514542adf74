// Package driverkit is the kit for writing a driver: the pieces that the
// drivers of this module share to implement the contract of package
// drivers. A host that composes berth does not need it.
//
//	func (s *sandbox) Exec(ctx context.Context,
//		cmd drivers.Command) (*drivers.Result, error) {
//		stdout := driverkit.NewOutputBuffer(cmd.OutputLimit)
//		// ... run cmd, writing its output to stdout ...
//		return &drivers.Result{Stdout: stdout.Bytes(),
//			Truncated: stdout.Truncated()}, nil
//	}
//
// OutputBuffer applies Command.OutputLimit (the first limit bytes are kept,
// writes never fail), AwaitDone makes a Wait honour its context, and
// CopyStdin feeds Command.Stdin without outliving the process. Signals and
// ParseSignal are the one signal set Process.Signal accepts on every
// driver.
//
// For runner ingress on sandboxes that run a POSIX shell,
// LaunchRunnerByExec starts the runner detached through two Execs (the
// ticket in a 0600 file, never in an argv), its output appended to
// runner.log in its state directory, and RunnerLogTailByExec reads that
// log's end (tail -c) for RunnerIngress.LogTail, which the controller puts
// in its error when a runner never says hello. Host drivers mark the
// runners they launch with RunnerMarkEnv.
//
// Where a host account can make one (root, a writable cgroup2 mount),
// LaunchRunnerByExec starts the runner in a cgroup of the lease's own
// (berth/<lease> under the host's cgroup2 mount), which CgroupKillScript,
// run by the lease manager, ends from outside: the evidence
// drivers.EvidenceCgroup (PRP-6).
package driverkit
