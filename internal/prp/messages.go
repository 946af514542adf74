package prp

import (
	"time"
)

// PoolRunPrefix starts the run of a warm-pool member's runner session
// before a lease adopts the member (TokenRenewal.Run).
const PoolRunPrefix = "pool."

// CommandKind names what a Command does.
type CommandKind string

// The command kinds.
const (
	CommandTaskStart CommandKind = "task.start"
	CommandTaskStop  CommandKind = "task.stop"
)

// Command is what the controller sends a runner, on its sequence of
// commands, and journals (PRP-4). ID is the idempotency key; Digest is the
// digest of the rest (the controller sets it, the runner checks it). Lease and
// Run name the scope it acts in (PRP-7). A command carries references,
// never secret values.
type Command struct {
	ID        string      `json:"id"`
	Digest    string      `json:"digest"`
	Kind      CommandKind `json:"kind"`
	Lease     string      `json:"lease"`
	Run       string      `json:"run"`
	TaskStart *TaskStart  `json:"task_start,omitempty"`
	TaskStop  *TaskStop   `json:"task_stop,omitempty"`
}

// TaskStart starts a task (PRP-6). Deadline zero means none; OutputLimit
// caps the bytes kept from stdout plus stderr, by the runner and by the
// controller that stores them; zero means the session's cap (the
// controller's Options.MaxSessionOutput) alone.
type TaskStart struct {
	TaskID      string            `json:"task_id"`
	Argv        []string          `json:"argv"`
	Env         map[string]string `json:"env,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Deadline    time.Time         `json:"deadline,omitzero"`
	OutputLimit int64             `json:"output_limit,omitempty"`
	Stdin       []byte            `json:"stdin,omitempty"`
	// Secrets are references to the secret values the task needs (see
	// SecretUse); the values arrive in a separate secrets frame, never in the
	// command. A task with secrets never runs without their values.
	Secrets []SecretUse `json:"secrets,omitempty"`
}

// TaskStop stops a task's whole process tree: SIGTERM, Grace, SIGKILL.
type TaskStop struct {
	TaskID string        `json:"task_id"`
	Grace  time.Duration `json:"grace_ns"`
}
