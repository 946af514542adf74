// Package runnerload is the load harness of the runner protocol (issue
// 55): simulated runners in processes of their own (internal/cmd/runnersim,
// at most Config.RunnersPerSim each, 2,500 by default: a runner holds about
// five descriptors and a process may open 20,000 here; their CPU and
// memory reported apart from the host's), each a real
// internal/runner.Runner (its ticket exchange, connection, journal and
// outbox) whose tasks are simulated in that process
// (runner.Options.SimulateTask: output at a set rate, no process
// started), connected over real WebSockets on loopback TCP to the real
// controller of a real berth.System on SQLite or PostgreSQL, each with a
// lease in the store. The System's driver is the fake's, whose runner
// ingress is an address of its own on loopback (127.1.x.y) served by one
// TCP listener for all of them (a listener per lease held two
// descriptors a session in the host, and 10,000 sessions would pass the
// 20,000 it may open; each ingress still gets its own connections only,
// by their destination address) and whose Launch hands the lease's ticket
// to a simulated runners' process.
//
// Run attaches every session by a first task (hello), then runs a stream
// task on every session for the configured duration and reports connected
// sessions, bytes offered (written by the simulated tasks and accepted by
// their runners: a full outbox blocks the writer, nothing is dropped) and
// stored (the store's output usage), dispatch latency (the host's Run to
// the simulated task's start in the runner), and the host's CPU, peak RSS
// and disk writes over the streaming window. With Config.Idle it runs no
// stream: the sessions are held connected with nothing to do for the
// duration (the protocol's upkeep only), and it reports the host's RSS
// (peak over the window, and at its end) and goroutines per session and
// the reconnects in the window, then pings every session. Everything stays on
// loopback, and a run is bounded by its sessions and duration: it stops by
// itself.
//
// The sizes: Full, StormFull and IdleFull are envctl bench's rows, Quick,
// StormQuick and IdleQuick their --quick variants; the test suite runs
// StormSmall only (TestStorm: 20 sessions over two simulated runners'
// processes for 4 s, 5 dropped), about 10 s under -race, where the quick
// sizes cost minutes of a shared two-core make test; envctl's
// TestBenchRunnersQuick runs the idle mode with 4 sessions for 1 s.
package runnerload
