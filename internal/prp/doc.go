// Package prp holds the data of berth's runner protocol (PRP, SPEC
// PRP-1..8): what a task is, what a runner reports about it, and the
// one-use tickets that let a runner in. The protocol runs between berth's
// runner inside a sandbox (the binary cmd/berth-runner, internal/runner)
// and the controller in the host (internal/controller, which berth.New
// wires behind lease.Handle.Run); its frames, codec, handshake, tokens and
// limits are internal/prpwire's. It is berth's own (issue 48): a host
// reads what it needs through package lease (lease.Exit, lease.StopProof,
// lease.SecretUse), and store.Stores.Runners, the store of these records,
// is sealed. It does no I/O besides crypto/rand.
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
//     hello is internal/prpwire's.
//   - Stable codes: a result's Code and every refusal on the wire carry the
//     protocol's codes, reasons listed in docs/errors.md with the errcode
//     code each is finer than; the sentinel errors of the ticket store and
//     of a scope (ErrScopeDenied) carry theirs (errcode.ReasonOf).
//   - Tickets: Ticket (32 random bytes, handed to a runner once, stored
//     only as its TicketHash), TicketRecord, Scope, and the TicketStore
//     interface berth's stores implement (the memory one, the SQL stores;
//     prp/prptest is its conformance suite).
//   - Signer, the opaque keys of the runners' connection tokens that
//     replicas share (berth.Options.RunnerKeys), and NewID.
//
// It sits on floor 0, below everything that names it (the controller, the
// hand-over's secret checks, the stores, the runner); its depcheck test
// keeps it and prptest there.
package prp
