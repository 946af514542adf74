package environment

import (
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/errmsg"
)

// reasonIsolationBelowMinimum is the reason of the gate's refusal of a
// target that declares less isolation than the minimum in force.
const reasonIsolationBelowMinimum = "isolation_below_minimum"

// checkIsolation refuses a requireIsolation that is no level.
func checkIsolation(label string, l drivers.Isolation) error {
	if l > drivers.IsolationMicroVM {
		return &Error{Environment: label, Field: "requireIsolation", Err: errcode.ErrInvalid,
			Reason: fmt.Sprintf("%s is no isolation level: want none, container, gvisor or microvm", l)}
	}
	return nil
}

// isolationRefusal returns nil when the level driver d declares for cfg
// (drivers.IsolationOf, no I/O) meets the minimum in force: the highest of
// the instance's MinimumIsolation, container while the instance allows
// managed sandboxes only (ManagedSandboxOnly), and require (an
// environment's RequireIsolation; none for a draft). Otherwise it returns an error with
// the reason isolation_below_minimum wrapping drivers.ErrUnavailable,
// whose sentence names target (the environment or the draft's driver),
// its level and the minimum, and which setting set it; short says the
// same without the target, for an *Error that names it.
func isolationRefusal(set instance.Settings, target string, d drivers.Driver, cfg config.Config, require drivers.Isolation) (short string, err error) {
	minimum, by := set.Minimum(), "the instance setting minimumIsolation"
	if minimum > set.MinimumIsolation {
		// Managed sandboxes only means a container at least, for every
		// target; a host driver is refused before this, by Admit, with
		// its own reason (managed_sandbox_only).
		by = "the instance setting enableManagedSandboxOnly"
	}
	if require > minimum {
		minimum, by = require, "the environment's requireIsolation"
	}
	declared := drivers.IsolationOf(d, cfg)
	if declared >= minimum {
		return "", nil
	}
	short = fmt.Sprintf("its isolation %s is below the minimum %s (%s)", declared, minimum, by)
	return short, &errcode.Error{Code: errcode.Unavailable, Reason: reasonIsolationBelowMinimum,
		Message: errmsg.Sentence(fmt.Sprintf("%s has isolation %s, below the minimum %s (%s): choose a target that isolates more, or change the setting", target, declared, minimum, by)),
		Err: fmt.Errorf("%s: driver %s declares isolation %s for its config, below the minimum %s set by %s: %w",
			target, d.Name(), declared, minimum, by, drivers.ErrUnavailable)}
}
