// Package drivertest is the driver conformance suite: the executable form of
// the drivers contract. Every driver's test file builds a Harness and calls
// RunConformanceTests (conformance.go for the core contract, optional.go for
// the capability-gated tests, failures.go for SPEC PRB-5's error table);
// RunBenchmarks (bench.go) measures acquire+exec+release against an exec
// anchor of the same run. One HarnessMaker serves both.
//
// Start with Harness and HarnessMaker (harness.go); the package example
// shows a third-party driver's harness. A harness may also implement:
//
//   - FailureHarness, to hand the suite configs broken in each way of the
//     error table (unreachable, bad or missing credentials, unknown image,
//     host key mismatch); the suite asserts the sentinels with errors.Is
//     and skips, saying so, a failure the harness says does not apply;
//   - ImageHarness, to point its config at a captured image, so that
//     capture and template deletion are checked end to end, including a
//     delete while a sandbox of the template is live (it succeeds, or fails
//     with drivers.ErrInUse and leaves the template usable) and after its
//     release (a confirmed receipt);
//   - ParallelHarness, to set the width of the parallel acquire subtest
//     (32 otherwise);
//   - RunnerHarness (required when the driver declares runner_ingress), to
//     give the runner binary that the runner ingress subtest launches;
//   - IsolationHarness (required when the driver declares an isolation
//     level above none), to give the kernel release of the machine the
//     sandboxes run on; the suite measures the level a task sees
//     (isolation.go) and fails a driver that declares more;
//   - HostProcessHarness, to say that its runners are processes of this
//     host, so that the suite checks a launched runner's process (one, its
//     ticket in neither argv nor environment) and that Release ends it
//     (runnerproc.go; berth's own driver tests share its process scanner,
//     internal/proctest).
//
// A driver without runner_ingress (undeclared, or narrowed away by the
// harness's config through drivers.ConfigNarrower) is checked to refuse an
// Acquire with a Runner before allocating anything.
//
// The target must offer a POSIX sh: the suite runs echo, cat, pwd, sleep,
// exit, ln -s and sh -c scripts (busybox is enough; a driver that runs argv and
// no shell, as the fake does, registers ScriptHandlers, the suite's scripts
// of several commands done in Go). Whatever the driver needs to run (a
// server, an engine, a fake API) is the harness's to start; the suite
// starts nothing.
package drivertest
