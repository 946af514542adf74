// Package prp is the wire side of berth's runner protocol (PRP, SPEC
// PRP-1..8): the frames a runner inside a sandbox and a controller in the
// host exchange over a WebSocket, and the bootstrap that authenticates the
// runner. It does no I/O besides crypto/rand; the runner is prp/runner and
// the controller prp/controller.
//
// Where to start:
//
//   - wire.go: Envelope (protocol, version, type, id, session, seq, ack,
//     body), DecodeFrame / EncodeFrame with a maximum frame size, the
//     subprotocol and the close codes.
//   - binary.go: OutputFrame, the binary frame an output event travels in
//     when CapBinaryOutput is granted (a fixed header naming version,
//     stream, session, task, seq, ack and offset, then the bytes; parsed
//     once, nothing copied); every other message is JSON.
//   - messages.go: Hello, Welcome (the controller's limits), Command
//     (task.start, task.stop) with its idempotency digest.
//   - events.go: Event (command results, task output as []byte, exits,
//     stop proofs) and StopProof.
//   - secrets.go: SecretUse (a task's reference to a secret value: from the
//     lease environment's secret env map or a managed account, into an env
//     var or a 0600 file) and SecretValues, the body of the TypeSecrets
//     frame that carries the values once, right before the command.
//   - version.go: version negotiation and capability grants.
//   - sequence.go: the contiguous-sequence check and the journal states
//     both sides keep.
//   - ticket.go, token.go: one-use tickets (32 random bytes, stored only as
//     a hash) and expiring HMAC connection tokens with key ids and claims
//     (lease, run, company, scope, session); stable error codes (CodeOf;
//     codes.go: every wire code is a Code, a sub-code of errcode's set that
//     Code.ErrorCode maps).
//   - store.go, exchange.go: the TicketStore interface with a memory
//     implementation, and the Exchanger that trades a ticket for a token in
//     one conditional store update, so that a replay fails on any replica.
//
// prp/prptest holds the TicketStore conformance suite.
package prp
