// Package prp is the wire side of berth's runner protocol (PRP, SPEC
// PRP-1..8): the frames a runner inside a sandbox and a controller in the
// host exchange over a WebSocket, and the bootstrap that authenticates the
// runner. It does no I/O besides crypto/rand; the runner is internal/runner and
// the controller prp/controller.
//
//	t, err := prp.NewTicket() // t.String() goes to the runner, once
//	err = store.CreateTicket(ctx, prp.TicketRecord{Hash: t.Hash(),
//		Lease: lease, Run: run, Company: co, Scope: prp.ScopeTask,
//		CreatedAt: now, ExpiresAt: now.Add(time.Minute)})
//	x := &prp.Exchanger{Store: store, Signer: signer}
//	resp, claims, err := x.Exchange(ctx, prp.ExchangeRequest{
//		Ticket: t.String(), Lease: lease}, now) // again: replayed
//	env, err := prp.DecodeFrame(frame, prp.DefaultMaxFrame)
//
// What it holds, by concern:
//
//   - Envelope (protocol, version, type, id, session, seq, ack, body),
//     DecodeFrame / EncodeFrame with a maximum frame size, the subprotocol
//     and the close codes.
//   - OutputFrame, the binary frame an output event travels in when
//     CapBinaryOutput is granted (a fixed header naming version, stream,
//     session, task, seq, ack and offset, then the bytes; parsed once,
//     nothing copied); every other message is JSON.
//   - Hello, Welcome (the controller's limits), Command (task.start,
//     task.stop) with its idempotency digest (CommandDigest).
//   - Event (command results, task output as []byte, exits, stop proofs)
//     and StopProof.
//   - SecretUse (a task's reference to a secret value: from the lease
//     environment's secret env map or a managed account, into an env var
//     or a 0600 file) and SecretValues, the body of the TypeSecrets frame
//     that carries the values once, right before the command.
//   - Version negotiation (Negotiate) and capability grants
//     (GrantCapabilities).
//   - The contiguous-sequence check (CheckSeq) and the journal states both
//     sides keep (JournalState).
//   - One-use tickets (Ticket: 32 random bytes, stored only as a hash) and
//     expiring HMAC connection tokens (Signer) with key ids and Claims
//     (lease, run, company, scope, session); stable error codes (CodeOf:
//     every wire code is a Code, a sub-code of errcode's set that
//     Code.ErrorCode maps).
//   - The TicketStore interface with a memory implementation
//     (MemoryTicketStore), and the Exchanger that trades a ticket for a
//     token in one conditional store update, so that a replay fails on any
//     replica.
//
// prp/prptest holds the TicketStore conformance suite.
package prp
