package prp

import (
	"time"
)

// EventKind names what an Event reports.
type EventKind string

// The event kinds.
const (
	// EventResult: a command's result (body Result); sent once per command,
	// and again, marked Duplicate, for a redelivered command.
	EventResult EventKind = "command.result"
	// EventStarted: a task's process started (TaskID, PID).
	EventStarted EventKind = "task.started"
	// EventOutput: output bytes of a task (body Output).
	EventOutput EventKind = "task.output"
	// EventExit: a task ended (body Exit).
	EventExit EventKind = "task.exit"
	// EventProof: a task was stopped (body StopProof), also when the runner
	// stopped it itself after the orphan grace. A stop of a task this
	// runner started, whose leader it reaped, sends the task's exit
	// before the proof and the stop's result.
	EventProof EventKind = "task.proof"
)

// Stream names an output stream.
type Stream string

// The output streams.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Event is what a runner reports, on its sequence of events (PRP-5). Exactly the payload
// its Kind names is set.
type Event struct {
	Kind   EventKind  `json:"kind"`
	TaskID string     `json:"task_id,omitempty"`
	PID    int        `json:"pid,omitempty"`
	Result *Result    `json:"result,omitempty"`
	Output *Output    `json:"output,omitempty"`
	Exit   *Exit      `json:"exit,omitempty"`
	Proof  *StopProof `json:"proof,omitempty"`
}

// ResultStatus is the outcome of a command.
type ResultStatus string

// The result statuses.
const (
	// ResultDone: the command ran to its end (a task exited, a stop was
	// verified or not: see the proof).
	ResultDone ResultStatus = "done"
	// ResultRejected: the command was refused and nothing ran (Code says
	// why).
	ResultRejected ResultStatus = "rejected"
	// ResultIndeterminate: the command was executing when the runner died;
	// it is never run again (PRP-4).
	ResultIndeterminate ResultStatus = "indeterminate"
)

// Result is the outcome of one command.
type Result struct {
	CommandID string       `json:"command_id"`
	Status    ResultStatus `json:"status"`
	// Duplicate is true when this result answers a redelivered command
	// from the journal; nothing ran again.
	Duplicate bool `json:"duplicate,omitempty"`
	// Code says why a command was rejected or is indeterminate ("" when it
	// is done): a stable code of the runner protocol, a reason of
	// docs/errors.md ("scope_denied", "start_failed", "interrupted", ...)
	// that says the errcode code it is finer than.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Exit is set for a task.start that ran to its end.
	Exit *Exit `json:"exit,omitempty"`
	// Proof is set for a task.stop.
	Proof *StopProof `json:"proof,omitempty"`
}

// Output is a chunk of a task's output: Data are the bytes at Offset of
// Stream (base64 in JSON, so invalid UTF-8 survives).
type Output struct {
	Stream Stream `json:"stream"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
	// Truncated is set by the controller on a stored chunk: the bytes of
	// it discarded past an output limit (what a runner sends is ignored).
	Truncated int64 `json:"truncated,omitempty"`
}

// Exit is how a task ended. Code is -1 when a signal ended it (Signal
// names it); Truncated says the output limit cut the output.
type Exit struct {
	Code      int    `json:"code"`
	Signal    string `json:"signal,omitempty"`
	Error     string `json:"error,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	TimedOut  bool   `json:"timed_out,omitempty"`
}

// Stop methods named in a StopProof.
const (
	// MethodGroup: kill(-pgid, 0) returned ESRCH.
	MethodGroup = "process_group"
	// MethodProcTag: no process in /proc carries the task's tag.
	MethodProcTag = "proc_tag_scan"
)

// StopProof is evidence that a task's processes are gone (PRP-6). Complete
// is true only when every method in Methods ran and found no survivor; a
// check that could not run is in Failed and makes the proof incomplete.
type StopProof struct {
	TaskID     string    `json:"task_id"`
	Methods    []string  `json:"methods"`
	Failed     []string  `json:"failed,omitempty"`
	Survivors  []int     `json:"survivors"`
	VerifiedAt time.Time `json:"verified_at"`
	Complete   bool      `json:"complete"`
}
