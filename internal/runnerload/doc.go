// Package runnerload is the load harness of the runner protocol (issue
// 55): simulated runners in a process of their own (internal/cmd/runnersim,
// its CPU and memory reported apart from the host's), each a real
// internal/runner.Runner (its ticket exchange, connection, journal and
// outbox) whose tasks are simulated in that process
// (runner.Options.SimulateTask: output at a set rate, no process
// started), connected over real WebSockets on loopback TCP to the real
// controller of a real berth.System on SQLite or PostgreSQL, each with a
// lease in the store. The System's driver is the fake's, whose runner
// ingress is a loopback TCP listener per lease and whose Launch hands the
// lease's ticket to the simulated runners' process.
//
// Run attaches every session by a first task (hello), then runs a stream
// task on every session for the configured duration and reports connected
// sessions, bytes offered (written by the simulated tasks and accepted by
// their runners: a full outbox blocks the writer, nothing is dropped) and
// stored (the store's output usage), dispatch latency (the host's Run to
// the simulated task's start in the runner), and the host's CPU, peak RSS
// and disk writes over the streaming window. Everything stays on
// loopback, and a run is bounded by its sessions and duration: it stops by
// itself.
//
// The sizes: Full and StormFull are envctl bench's rows, Quick and
// StormQuick their --quick variants; the test suite runs StormSmall only
// (TestStorm: 20 sessions for 4 s, 5 dropped), about 10 s under -race,
// where the quick sizes cost minutes of a shared two-core make test.
package runnerload
