package prpwire

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/prp"
)

// MaxTicketTTL is the longest a ticket lives (PRP-2): ValidateTicketRecord
// refuses a longer one.
const MaxTicketTTL = 5 * time.Minute

// ValidateCommand checks c's fields and that its Digest matches its body
// (SealCommand).
func ValidateCommand(c prp.Command) error {
	if !ValidID(c.ID) {
		return fmt.Errorf("command: field id %q is not a valid id", c.ID)
	}
	if !ValidID(c.Lease) || !ValidID(c.Run) {
		return fmt.Errorf("command %s: fields lease %q / run %q are not valid ids", c.ID, c.Lease, c.Run)
	}
	switch c.Kind {
	case prp.CommandTaskStart:
		if c.TaskStart == nil || c.TaskStop != nil {
			return fmt.Errorf("command %s: field task_start must be the only payload", c.ID)
		}
		if !ValidID(c.TaskStart.TaskID) {
			return fmt.Errorf("command %s: field task_start.task_id %q is not a valid id", c.ID, c.TaskStart.TaskID)
		}
		if len(c.TaskStart.Argv) == 0 || c.TaskStart.Argv[0] == "" {
			return fmt.Errorf("command %s: field task_start.argv is empty", c.ID)
		}
		if c.TaskStart.OutputLimit < 0 {
			return fmt.Errorf("command %s: field task_start.output_limit is negative", c.ID)
		}
		if err := validateSecretUses(c.TaskStart.Secrets); err != nil {
			return fmt.Errorf("command %s: task_start: %w", c.ID, err)
		}
	case prp.CommandTaskStop:
		if c.TaskStop == nil || c.TaskStart != nil {
			return fmt.Errorf("command %s: field task_stop must be the only payload", c.ID)
		}
		if !ValidID(c.TaskStop.TaskID) {
			return fmt.Errorf("command %s: field task_stop.task_id %q is not a valid id", c.ID, c.TaskStop.TaskID)
		}
		if c.TaskStop.Grace < 0 {
			return fmt.Errorf("command %s: field task_stop.grace is negative", c.ID)
		}
	default:
		return fmt.Errorf("command %s: field kind %q is unknown", c.ID, c.Kind)
	}
	if want := commandDigest(c); c.Digest != want {
		return fmt.Errorf("command %s: field digest does not match the body", c.ID)
	}
	return nil
}

// CommandTaskID returns the id of the task c acts on.
func CommandTaskID(c prp.Command) string {
	switch {
	case c.TaskStart != nil:
		return c.TaskStart.TaskID
	case c.TaskStop != nil:
		return c.TaskStop.TaskID
	}
	return ""
}

// ValidateEvent checks that e's payload matches its kind.
func ValidateEvent(e prp.Event) error {
	n := 0
	for _, set := range []bool{e.Result != nil, e.Output != nil, e.Exit != nil, e.Proof != nil} {
		if set {
			n++
		}
	}
	want := 1
	var ok bool
	switch e.Kind {
	case prp.EventResult:
		ok = e.Result != nil
	case prp.EventStarted:
		ok, want = e.PID > 0, 0
	case prp.EventOutput:
		ok = e.Output != nil && e.Output.Offset >= 0 && (e.Output.Stream == prp.Stdout || e.Output.Stream == prp.Stderr)
	case prp.EventExit:
		ok = e.Exit != nil
	case prp.EventProof:
		ok = e.Proof != nil
	default:
		return fmt.Errorf("event: field kind %q is unknown", e.Kind)
	}
	if !ok || n != want {
		return fmt.Errorf("event: the payload does not match kind %q", e.Kind)
	}
	if e.Kind != prp.EventResult && !ValidID(e.TaskID) {
		return fmt.Errorf("event %s: field task_id %q is not a valid id", e.Kind, e.TaskID)
	}
	return nil
}

// ValidateTicketRecord checks r's fields, including ExpiresAt - CreatedAt
// <= MaxTicketTTL.
func ValidateTicketRecord(r prp.TicketRecord) error {
	switch {
	case !ValidID(r.Lease) || !ValidID(r.Run) || !ValidID(r.Company):
		return fmt.Errorf("prp: ticket record: fields lease %q / run %q / company %q must be valid ids", r.Lease, r.Run, r.Company)
	case !r.Scope.Valid():
		return fmt.Errorf("prp: ticket record: field scope %q is unknown", r.Scope)
	case r.CreatedAt.IsZero() || !r.ExpiresAt.After(r.CreatedAt):
		return errors.New("prp: ticket record: field expires_at must be after created_at")
	case r.Resume != "" && !ValidID(r.Resume):
		return fmt.Errorf("prp: ticket record: field resume %q must be a valid id", r.Resume)
	case r.ExpiresAt.Sub(r.CreatedAt) > MaxTicketTTL:
		return fmt.Errorf("prp: ticket record: lifetime %v exceeds %v", r.ExpiresAt.Sub(r.CreatedAt), MaxTicketTTL)
	}
	return nil
}

// validateSecretUses checks a task's uses: each valid, at most
// MaxSecretUses, no env name or file twice, at most one managed account.
func validateSecretUses(uses []prp.SecretUse) error {
	if len(uses) > MaxSecretUses {
		return fmt.Errorf("field secrets has %d entries, more than %d", len(uses), MaxSecretUses)
	}
	seen := map[string]bool{}
	accounts := 0
	for i := range uses {
		u := &uses[i]
		if err := u.Validate(); err != nil {
			return fmt.Errorf("field secrets[%d]: %w", i, err)
		}
		key := "env:" + u.Env
		if u.File != "" {
			key = "file:" + u.File
		}
		if seen[key] {
			return fmt.Errorf("field secrets[%d]: %s is the target of two secrets", i, strings.TrimPrefix(strings.TrimPrefix(key, "env:"), "file:"))
		}
		seen[key] = true
		if u.Source == prp.SecretFromManagedAccount {
			accounts++
		}
	}
	if accounts > 1 {
		return errors.New("field secrets names more than one managed account")
	}
	return nil
}
