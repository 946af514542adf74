package prpwire

import (
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/prp"
)

// The capabilities this package knows.
const (
	// CapTasks: the runner executes task.start / task.stop.
	CapTasks prp.Capability = "tasks"
	// CapStopProof: task.stop answers with a prp.StopProof.
	CapStopProof prp.Capability = "stop_proof"
	// CapStdin: task.start may carry stdin bytes.
	CapStdin prp.Capability = "stdin"
	// CapSecrets: task.start may carry secret references whose values
	// arrive in a TypeSecrets frame.
	CapSecrets prp.Capability = "secrets"
)

// Welcome is the controller's answer to a prp.Hello. The controller sets every
// limit; the runner starts nothing before its first Welcome.
type Welcome struct {
	Version         int           `json:"version"`
	Session         string        `json:"session"`
	Heartbeat       time.Duration `json:"heartbeat_ns"`
	DeadAfter       time.Duration `json:"dead_after_ns"`
	MaxFrame        int           `json:"max_frame"`
	MaxOutputChunk  int           `json:"max_output_chunk"`
	MaxUnackedBytes int64         `json:"max_unacked_bytes"`
	OrphanGrace     time.Duration `json:"orphan_grace_ns"`
	// EventAck is the controller's cumulative ack of the runner's events;
	// the runner replays its outbox from EventAck+1.
	EventAck uint64 `json:"event_ack"`
	// NextCommandSeq is the seq of the next command the controller sends.
	NextCommandSeq uint64           `json:"next_command_seq"`
	Capabilities   []prp.Capability `json:"capabilities"`
	TokenExpiry    time.Time        `json:"token_expiry"`
}

// Validate checks the welcome's fields, including that one output chunk,
// base64-encoded in an event, fits into a frame.
func (w *Welcome) Validate() error {
	switch {
	case w.Version < 1:
		return fmt.Errorf("welcome: field version %d is invalid", w.Version)
	case !prp.ValidID(w.Session):
		return fmt.Errorf("welcome: field session %q is not a valid id", w.Session)
	case w.Heartbeat <= 0 || w.DeadAfter < w.Heartbeat:
		return fmt.Errorf("welcome: fields heartbeat %v / dead_after %v are invalid", w.Heartbeat, w.DeadAfter)
	case w.MaxFrame < MinMaxFrame || w.MaxFrame > HardMaxFrame:
		return fmt.Errorf("welcome: field max_frame %d is outside [%d,%d]", w.MaxFrame, MinMaxFrame, HardMaxFrame)
	case w.MaxOutputChunk < 1 || w.MaxOutputChunk/3*4+8192 > w.MaxFrame:
		return fmt.Errorf("welcome: field max_output_chunk %d does not fit a frame of %d bytes", w.MaxOutputChunk, w.MaxFrame)
	case w.MaxUnackedBytes < int64(w.MaxFrame):
		return fmt.Errorf("welcome: field max_unacked_bytes %d is below max_frame", w.MaxUnackedBytes)
	case w.OrphanGrace < 0:
		return fmt.Errorf("welcome: field orphan_grace %v is negative", w.OrphanGrace)
	case w.NextCommandSeq < 1:
		return errors.New("welcome: field next_command_seq must be positive")
	}
	return nil
}

// Has reports whether caps contains c.
func Has(caps []prp.Capability, c prp.Capability) bool {
	for _, x := range caps {
		if x == c {
			return true
		}
	}
	return false
}

// TokenRenewal carries a renewed connection token (TypeToken).
type TokenRenewal struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	// Run, when set, is the run the renewed token is for: a warm-pool
	// member's runner (its run prp.PoolRunPrefix and the member's id) is
	// handed to the lease that adopted the member, and accepts commands
	// for that lease's run from then on. A runner of any other run
	// refuses a renewal that names another run.
	Run string `json:"run,omitempty"`
}
