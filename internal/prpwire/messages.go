package prpwire

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/qualification"
)

// The capabilities this package knows.
const (
	// CapTasks: the runner executes task.start / task.stop.
	CapTasks Capability = "tasks"
	// CapStopProof: task.stop answers with a prp.StopProof.
	CapStopProof Capability = "stop_proof"
	// CapStdin: task.start may carry stdin bytes.
	CapStdin Capability = "stdin"
	// CapSecrets: task.start may carry secret references whose values
	// arrive in a TypeSecrets frame.
	CapSecrets Capability = "secrets"
)

// Welcome is the controller's answer to a Hello. The controller sets every
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
	NextCommandSeq uint64       `json:"next_command_seq"`
	Capabilities   []Capability `json:"capabilities"`
	TokenExpiry    time.Time    `json:"token_expiry"`
}

// Validate checks the welcome's fields, including that one output chunk,
// base64-encoded in an event, fits into a frame.
func (w *Welcome) Validate() error {
	switch {
	case w.Version < 1:
		return fmt.Errorf("welcome: field version %d is invalid", w.Version)
	case !ValidID(w.Session):
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
func Has(caps []Capability, c Capability) bool {
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

// Capability is a feature flag; a feature is used only when the runner
// offers it in the Hello and the controller grants it in its answer; the
// capabilities berth knows are internal/prpwire's.
type Capability string

// Resume is the runner's cursor in a Hello: what it has of both sequences.
type Resume struct {
	// LastCommandSeq is the highest command seq the runner has journaled
	// (0: none). The controller sends from LastCommandSeq+1.
	LastCommandSeq uint64 `json:"last_command_seq"`
	// OldestUnackedEvent is the lowest event seq still in the runner's
	// outbox (0: the outbox is empty); NextEventSeq the seq its next event
	// gets. A controller whose ack+1 is below OldestUnackedEvent knows the
	// events in between were lost on the sandbox's disk.
	OldestUnackedEvent uint64 `json:"oldest_unacked_event"`
	NextEventSeq       uint64 `json:"next_event_seq"`
}

// Hello is the runner's first message on every connection (PRP-3, PRP-8).
type Hello struct {
	MinVersion    int                    `json:"min_version"`
	MaxVersion    int                    `json:"max_version"`
	RunnerVersion string                 `json:"runner_version"`
	BinarySHA256  string                 `json:"binary_sha256"`
	Platform      qualification.Platform `json:"platform"`
	Capabilities  []Capability           `json:"capabilities"`
	Resume        Resume                 `json:"resume"`
}

// Validate checks the hello's fields.
func (h *Hello) Validate() error {
	if h.MinVersion < 1 || h.MaxVersion < h.MinVersion {
		return fmt.Errorf("hello: field versions [%d,%d] is not a range", h.MinVersion, h.MaxVersion)
	}
	if h.RunnerVersion == "" || len(h.RunnerVersion) > 128 {
		return errors.New("hello: field runner_version is empty or too long")
	}
	if len(h.BinarySHA256) != 64 {
		return fmt.Errorf("hello: field binary_sha256 %q is not a SHA-256 hex digest", h.BinarySHA256)
	}
	if _, err := hex.DecodeString(h.BinarySHA256); err != nil {
		return fmt.Errorf("hello: field binary_sha256 %q is not hex", h.BinarySHA256)
	}
	if len(h.Capabilities) > 64 {
		return errors.New("hello: field capabilities has more than 64 entries")
	}
	if !h.Platform.IsZero() {
		if err := h.Platform.Validate(); err != nil {
			return fmt.Errorf("hello: field platform: %v", err)
		}
	}
	return nil
}
