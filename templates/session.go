package templates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/errmsg"
	"github.com/berthdev/berth/internal/templatehook"
)

// SessionState is a setup session's state (IMG-4): starting ->
// waiting_for_user -> capturing -> captured | promoted; any active state ->
// cancelled | timed_out | failed.
type SessionState string

// The setup session states.
const (
	// SessionStarting: the setup sandbox is being leased, or the scripted
	// steps run.
	SessionStarting SessionState = "starting"
	// SessionWaiting: the sandbox waits for the operator (an interactive
	// session after its steps).
	SessionWaiting SessionState = "waiting_for_user"
	// SessionCapturing: the capture runs.
	SessionCapturing SessionState = "capturing"
	// SessionCaptured: a template was made and not promoted.
	SessionCaptured SessionState = "captured"
	// SessionPromoted: the template was made and promoted.
	SessionPromoted SessionState = "promoted"
	// SessionCancelled: an operator cancelled it.
	SessionCancelled SessionState = "cancelled"
	// SessionTimedOut: its TTL or cap passed; Sweep ended it.
	SessionTimedOut SessionState = "timed_out"
	// SessionFailed: a step, the lease or the capture failed.
	SessionFailed SessionState = "failed"
)

// Active reports whether a session in state s holds its environment's one
// active slot (starting, waiting_for_user, capturing).
func (s SessionState) Active() bool {
	return s == SessionStarting || s == SessionWaiting || s == SessionCapturing
}

// Session is a setup session of an environment: a setup sandbox leased
// under authz.InstanceCompany, its scripted steps and terminal, and the
// template it captured.
type Session struct {
	ID          string       `json:"id"`
	Environment string       `json:"environment"`
	Name        string       `json:"name,omitempty"`
	Driver      string       `json:"driver"`
	State       SessionState `json:"state"`
	// Interactive sessions wait for the operator after their steps.
	Interactive bool `json:"interactive,omitempty"`
	// Steps counts the scripted steps.
	Steps int `json:"steps,omitempty"`
	// ContentHash is the hash of a scripted setup's inputs (ScriptHash);
	// empty for an interactive session.
	ContentHash string `json:"contentHash,omitempty"`
	// Base is what the content hash was computed over besides the steps:
	// the image identity setup started from and the platform.
	Base string `json:"base,omitempty"`
	// Lease is the setup lease's id (Company authz.InstanceCompany).
	Lease string `json:"lease,omitempty"`
	// LeaseCleanup is the setup lease's cleanup status after the session
	// ended ("confirmed": destroyed with proof).
	LeaseCleanup string `json:"leaseCleanup,omitempty"`
	// Template is the template captured (or reused).
	Template string `json:"template,omitempty"`
	// Reused reports that a finished template with the same content hash
	// answered the session: nothing was leased or built.
	Reused bool `json:"reused,omitempty"`
	// BaseTemplate is the environment's active template the sandbox
	// started from ("" for the configured image).
	BaseTemplate string    `json:"baseTemplate,omitempty"`
	CreatedAt    time.Time `json:"createdAt"`
	CreatedBy    string    `json:"createdBy,omitempty"`
	UpdatedAt    time.Time `json:"updatedAt"`
	// TTL is the session's TTL (SetupRequest.TTL or Options.SessionTTL).
	TTL time.Duration `json:"ttl,omitempty"`
	// ExpiresAt is the TTL's end, pushed back by activity up to Deadline.
	ExpiresAt time.Time `json:"expiresAt"`
	// Deadline is the TTL's cap.
	Deadline time.Time `json:"deadline"`
	// FailureReason says why the session failed.
	FailureReason string `json:"failureReason,omitempty"`
	// Version starts at 1 and grows by one on every store update.
	Version int64 `json:"version"`
}

// clone returns a copy of s.
func (s *Session) clone() *Session {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// SessionEvent is one progress event of a session; Seq is its cursor
// (1, 2, ...), assigned by the store.
type SessionEvent struct {
	Session string    `json:"session"`
	Seq     int64     `json:"seq"`
	At      time.Time `json:"at"`
	// State is the session's state after the event.
	State SessionState `json:"state"`
	// Step is the 1-based step the event is about (0: none).
	Step    int    `json:"step,omitempty"`
	Message string `json:"message"`
}

// ErrSessionActive: the environment already has an active setup session
// (the store's unique constraint refused a second one); code conflict.
var ErrSessionActive error = &errcode.Error{Code: errcode.Conflict, Reason: "setup_session_active",
	Message: "The environment already has an active setup session: finish or cancel it first.",
	Err:     errors.New("custom: the environment has an active setup session")}

// badStep is a setup script's step n that is malformed.
func badStep(n int, err error) error {
	return &errcode.Error{Field: "script", Message: errmsg.Sentence(fmt.Sprintf("The setup script is not valid at step %d: %v", n, err)),
		Err: fmt.Errorf("custom: setup script: step %d: %v: %w", n, err, errcode.ErrInvalid)}
}

// lacks is the refusal of an action (what, for a person) that the
// environment's driver lacks capability c for.
func lacks(env, driver string, c drivers.Capability, what string, err error) error {
	return &errcode.Error{Message: fmt.Sprintf("Environment %q cannot %s: its driver %s lacks the capability %s; use an environment whose driver has it.", env, what, driver, c),
		Err: err}
}

// setupScript is a scripted setup: steps run in order in the setup sandbox
// (IMG-4). Its JSON form is
//
//	{"steps": [{"run": ["sh", "-c", "…"]}, {"write": {"path": "/etc/motd", "mode": "0644", "content": "…"}}]}
//
// A step that needs a secret reads it from its environment at exec time:
// every command in the sandbox sees the environment's secret env map
// (for example "$GITHUB_TOKEN"), so it is never written into the script
// or the store.
type setupScript struct {
	Steps []setupStep `json:"steps"`
}

// setupStep is one scripted step: exactly one of Run and Write.
type setupStep struct {
	// Run is an argv list, run as it is (no shell unless it names one).
	Run []string `json:"run,omitempty"`
	// Write writes a file.
	Write *writeFile `json:"write,omitempty"`
}

// writeFile is a file a step writes, its parent directories made.
type writeFile struct {
	// Path is absolute.
	Path string `json:"path"`
	// Mode is an octal string ("0644"); default "0644".
	Mode    string `json:"mode,omitempty"`
	Content string `json:"content"`
}

// maxScriptBytes bounds a setup script (parseScript reads no more).
const maxScriptBytes = 16 << 20

// parseScript reads a script's JSON from r: unknown keys are refused,
// naming the step, as are steps with neither or both of run and write, a
// relative path, a mode that is not octal, and a script longer than
// maxScriptBytes (no more of r is read).
func parseScript(r io.Reader) (*setupScript, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("custom: reading the setup script: %w", err)
	}
	if len(data) > maxScriptBytes {
		return nil, fmt.Errorf("custom: setup script: longer than %d bytes, the most a script may be: %w", maxScriptBytes, errcode.ErrInvalid)
	}
	var top struct {
		Steps []json.RawMessage `json:"steps"`
	}
	if err := strictDecode(data, &top); err != nil {
		return nil, fmt.Errorf("custom: setup script: %v: %w", err, errcode.ErrInvalid)
	}
	if len(top.Steps) == 0 {
		return nil, fmt.Errorf("custom: setup script: no steps: %w", errcode.ErrInvalid)
	}
	sc := &setupScript{}
	for i, raw := range top.Steps {
		var st setupStep
		if err := strictDecode(raw, &st); err != nil {
			return nil, badStep(i+1, err)
		}
		if err := st.check(); err != nil {
			return nil, badStep(i+1, err)
		}
		sc.Steps = append(sc.Steps, st)
	}
	return sc, nil
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func (st setupStep) check() error {
	switch {
	case len(st.Run) > 0 && st.Write != nil:
		return errors.New(`both "run" and "write"`)
	case len(st.Run) == 0 && st.Write == nil:
		return errors.New(`neither "run" nor "write"`)
	case st.Write != nil:
		if !strings.HasPrefix(st.Write.Path, "/") {
			return fmt.Errorf("write: path %q is not absolute", st.Write.Path)
		}
		if _, err := st.Write.mode(); err != nil {
			return err
		}
	}
	return nil
}

func (w *writeFile) mode() (string, error) {
	if w.Mode == "" {
		return "0644", nil
	}
	m, err := strconv.ParseUint(w.Mode, 8, 32)
	if err != nil || m > 0o7777 {
		return "", fmt.Errorf("write %s: mode %q is not an octal string such as \"0644\"", w.Path, w.Mode)
	}
	return fmt.Sprintf("%04o", m), nil
}

// hash returns the content address of running sc on base: the hex SHA-256
// of base (the environment's image identity and platform, see
// Service.Setup) and of each step, a file by its path, mode and content
// digest.
func (sc *setupScript) hash(base string) string {
	h := sha256.New()
	fmt.Fprintf(h, "berth-setup-v1\x00base=%q\n", base)
	for _, st := range sc.Steps {
		if st.Write != nil {
			mode, _ := st.Write.mode()
			sum := sha256.Sum256([]byte(st.Write.Content))
			fmt.Fprintf(h, "write %q %s sha256:%x\n", st.Write.Path, mode, sum)
			continue
		}
		argv, _ := json.Marshal(st.Run)
		fmt.Fprintf(h, "run %s\n", argv)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// errTokenInvalid: a terminal token that is unknown, used, expired, or
// presented for another session, path or principal (the stores' sentinel,
// templatehook.ErrTokenInvalid).
var errTokenInvalid = templatehook.ErrTokenInvalid
