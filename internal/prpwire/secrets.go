package prpwire

import (
	"fmt"
)

// Limits of the secrets of one task.
const (
	// MaxSecretUses is the most prp.SecretUse entries one task.start carries
	// (ValidateCommand checks it) and the most values a secrets frame carries.
	MaxSecretUses = 64
	// MaxSecretValue is the largest secret value (64 KiB) a secrets frame
	// carries.
	MaxSecretValue = 64 << 10
)

// SecretValues is the body of a TypeSecrets envelope: the values of the
// Secrets of task.start command CommandID, in the same order, sent by the
// controller right before that command on the same connection and only
// then (never on a redelivery of a command that has a result). The runner
// keeps them in memory only and hands them to the task; they are never
// journaled, stored or echoed in an event. Code and Message, set instead of
// Values, say why the controller could not resolve them (the runner then
// refuses the command with that code; Message names references, never a
// value).
type SecretValues struct {
	CommandID string   `json:"command_id"`
	Values    []string `json:"values,omitempty"`
	Code      string   `json:"code,omitempty"`
	Message   string   `json:"message,omitempty"`
}

// Validate checks the body: a valid command id, either values (each at most
// MaxSecretValue bytes) or a code.
func (s *SecretValues) Validate() error {
	if !ValidID(s.CommandID) {
		return fmt.Errorf("secrets: field command_id %q is not a valid id", s.CommandID)
	}
	if s.Code != "" && len(s.Values) > 0 {
		return fmt.Errorf("secrets for %s: fields values and code are exclusive", s.CommandID)
	}
	if len(s.Values) > MaxSecretUses {
		return fmt.Errorf("secrets for %s: field values has more than %d entries", s.CommandID, MaxSecretUses)
	}
	for i, v := range s.Values {
		if len(v) > MaxSecretValue {
			// The length only: never the value.
			return fmt.Errorf("secrets for %s: field values[%d] is longer than %d bytes", s.CommandID, i, MaxSecretValue)
		}
	}
	return nil
}

// String names the command and the number of values; never a value, so
// that a log line or %v cannot show one.
func (s SecretValues) String() string {
	if s.Code != "" {
		return fmt.Sprintf("secrets for %s: %s", s.CommandID, s.Code)
	}
	return fmt.Sprintf("secrets for %s: %d values", s.CommandID, len(s.Values))
}

// GoString is String, so that %#v cannot show a value either.
func (s SecretValues) GoString() string { return s.String() }
