// Package prp holds the data of berth's runner protocol (PRP, SPEC
// PRP-1..8) that hosts and store authors name: what a task is, what a
// runner reports about it, and the one-use tickets that let a runner in.
// The protocol runs between berth's runner inside a sandbox (the binary
// cmd/berth-runner) and the controller in the host (prp/controller, which
// System.Runners returns); its frames, codec, handshake, tokens and limits
// are berth's own (internal/prpwire) and no host needs them. It does no
// I/O besides crypto/rand.
//
//	exit, err := task.Wait(ctx) // a controller.Task started with a TaskSpec
//	                            // that embeds prp.TaskStart{Argv: ...}
//	if exit.Code != 0 { ... }   // prp.Exit: code, signal, timed out, truncated
//	proof, err := task.Stop(ctx) // embeds prp.StopProof: Complete, Survivors
//
// What it holds, by concern:
//
//   - A task and its secrets: TaskStart (argv, env, cwd, deadline, stdin,
//     output limit) and SecretUse (a reference to a secret value from the
//     lease environment's secret env map or a managed account, handed to
//     the task as an env var or a 0600 file; the values travel apart and
//     are never journaled, stored or echoed).
//   - What the controller journals and stores: Command (task.start,
//     task.stop, with an idempotency digest the controller sets) with its
//     JournalState, Event (a command's Result, task output as Output
//     chunks of a Stream, the task's Exit, a StopProof). The runner's
//     hello is internal/prpwire's (controller.Hello is what a host reads).
//   - Stable codes: a result's Code and every refusal on the wire carry the
//     protocol's codes, reasons listed in docs/errors.md with the errcode
//     code each is finer than; the sentinel errors of the ticket store and
//     of a scope (ErrScopeDenied) carry theirs (errcode.ReasonOf).
//   - Tickets: Ticket (32 random bytes, handed to a runner once, stored
//     only as its TicketHash), TicketRecord, Scope, and the TicketStore
//     interface a store implements (store.Memory's memory store, the SQL
//     stores; prp/prptest is its conformance suite).
//   - Signer, the opaque keys of the runners' connection tokens that
//     replicas share (berth.Options.RunnerSigner), and NewID.
//
// Why prp/controller (floor 4) lives under this floor-0 package: the
// folder is the protocol. Its data (here) stays on floor 0, below
// everything that names it (handover's secret checks, the stores, the
// runner), while the controller serves runners on top of leases, the
// instance settings and authorization, so it sits on floor 4. The README's
// package table gives each its floor; prp's own depcheck test keeps prp
// and prptest on floor 0. Splitting the folder (prp as a top-level data
// package, the controller elsewhere) would rename the import path hosts
// use for the controller for no gain in what imports what.
package prp
