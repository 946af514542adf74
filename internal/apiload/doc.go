// Package apiload is the load harness of the example server's API (issue
// 55, "the API under load"): the server (examples/server, built) in a
// process of its own on PostgreSQL, listening on 127.0.0.1 with the fake
// driver in test mode, and the load generator (internal/cmd/apiload, Go's
// net/http client) in another, so that each process's CPU and memory are
// reported apart.
//
// Run starts the server with its caps on runs and event streams far above
// the mix's and raises the instance's lease quotas likewise (a 429 that
// still comes is counted apart, never as an error), creates a fake
// environment and Config.Streams runs whose task (the generator's own
// binary, "apiload emit") writes StreamRate bytes/s of output for the
// window, and runs the generator: Config.Clients clients, each looping
// over the mix (Kinds: list environments, read a lease, open a run's
// output stream and read it for a second, start a run of true on the
// fake) for Config.Duration, and one follower per stream run that reads
// its output from the start to its end. The generator prints a Summary:
// per kind the count, p50, p99 and statuses; the followers' bytes read
// against written and whether they saw the end (kept up).
//
// Reads (ReadKinds) have the goal, p99 <= 200 ms; runs and streams
// report their own figures. Everything stays on loopback, and a run stops
// by itself: the clients after Duration, the followers at their run's end
// or a grace, the whole run within twice Duration and five minutes.
//
// The sizes: Full is envctl bench's api-load row (200 clients for 60 s),
// Quick its --quick variant, Small the test suite's (TestAPILoad).
//
// The server runs as its own process, not as a handler in the harness's:
// examples/server is a main package, which no other package imports.
package apiload
