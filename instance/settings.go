package instance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// Settings are the instance settings of CFG-9: the source description's
// enableEnvironments and enableManagedSandboxOnly, kept in the store and
// changed only by instance admins (Service.Update).
type Settings struct {
	// EnableEnvironments lets environments become working targets. With it
	// off, resolution, probes and lease acquisition refuse (an error
	// wrapping ErrEnvironmentsDisabled), while releases, sweeps and the
	// catalog's reads and edits go on. When no record was ever written it
	// is true (Defaults).
	EnableEnvironments bool `json:"enableEnvironments"`
	// ManagedSandboxOnly makes host drivers (drivers.KindHost: local, ssh)
	// unavailable as targets, with the reason managed_sandbox_only
	// (ErrManagedSandboxOnly); saved host environments stay readable. It
	// also means a minimum isolation of container for every target and
	// principal, as MinimumIsolation container does: a sandbox driver
	// that declares less for its config (one that declares no isolation)
	// is refused with the reason isolation_below_minimum naming this
	// setting; the stronger of the two minimums is in force. When no
	// record was ever written it is false (Defaults).
	ManagedSandboxOnly bool `json:"enableManagedSandboxOnly"`
	// MinimumIsolation is the least isolation a target's driver must
	// declare for its config (drivers.IsolationOf) to be a working target,
	// for every principal: an acquisition, resolution or probe of a
	// target below it is refused before anything is allocated, with the
	// reason isolation_below_minimum naming the target, its level and the
	// minimum. An environment's RequireIsolation can raise it for that
	// environment, never lower it. When never set it is
	// drivers.IsolationNone, no minimum (Defaults); "container" also
	// refuses host drivers, as ManagedSandboxOnly does (with its own
	// reason, managed_sandbox_only, which keeps working).
	MinimumIsolation drivers.Isolation `json:"minimumIsolation"`
	// QuotaPerCompany limits the live leases of one company over every
	// environment (lease.Quotas.PerCompany); 0 sets no limit. Every
	// lease manager of the instance (berth.New wires it; envctl and every
	// replica of a host) enforces it. When never set it is
	// 8 (Defaults).
	QuotaPerCompany int `json:"quotaPerCompany"`
	// QuotaPerCompanyEnvironment limits the live leases of one company on
	// one environment (lease.Quotas.PerCompanyEnvironment); 0 sets no
	// limit. When never set it is 4 (Defaults).
	QuotaPerCompanyEnvironment int `json:"quotaPerCompanyEnvironment"`
	// Revision counts the writes: 0 for the defaults (never written), then
	// 1, 2, ... Service.Update takes the revision it read, and a stale one
	// is a conflict.
	Revision int64 `json:"revision"`
	// UpdatedAt is when the record was last written (zero for the
	// defaults).
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	// UpdatedBy is the id of the principal who last wrote it ("" for the
	// defaults).
	UpdatedBy string `json:"updatedBy,omitempty"`
}

// The lease quotas in force when they were never set (Defaults; a record
// written before the quotas were settings has them too).
const (
	defaultQuotaPerCompany            = 8
	defaultQuotaPerCompanyEnvironment = 4
)

// Defaults returns the settings in force when no record was ever written:
// environments enabled, host drivers allowed, the default lease quotas (8
// live leases per company, 4 per company on one environment), revision 0.
// Embedding hosts and existing installations keep working; a host that
// wants the source product's "enable it first" writes EnableEnvironments
// false at its first start.
func Defaults() Settings {
	return Settings{EnableEnvironments: true,
		QuotaPerCompany: defaultQuotaPerCompany, QuotaPerCompanyEnvironment: defaultQuotaPerCompanyEnvironment}
}

// Minimum returns the least isolation every target must declare under s,
// for every principal: the stronger of MinimumIsolation and, while
// ManagedSandboxOnly is on, drivers.IsolationContainer. The zero Settings
// give drivers.IsolationNone, no minimum. It is pure: no I/O.
func (s Settings) Minimum() drivers.Isolation {
	if s.ManagedSandboxOnly && s.MinimumIsolation < drivers.IsolationContainer {
		return drivers.IsolationContainer
	}
	return s.MinimumIsolation
}

// reasonManagedSandboxOnly is the reason a host driver is unavailable while
// Settings.ManagedSandboxOnly is on (CAP-3): the text of
// ErrManagedSandboxOnly, and the probe's result code
// ("managed_sandbox_only").
const reasonManagedSandboxOnly = "managed_sandbox_only"

// Admit returns nil when s lets a target of the driver named driver become
// a working target; host says whether it is a host driver
// (drivers.KindHost). It returns an error wrapping ErrEnvironmentsDisabled
// when environments are disabled, and one wrapping ErrManagedSandboxOnly
// for a host driver while managed-sandbox-only is on; each names the
// setting. It is pure: no I/O.
func (s Settings) Admit(driver string, host bool) error {
	if !s.EnableEnvironments {
		return &errcode.Error{Reason: "environments_disabled",
			Message: "Environments are disabled in this instance: an instance admin can turn on enableEnvironments in the settings.",
			Err:     fmt.Errorf("the instance setting enableEnvironments is off: no environment can be a working target until an instance admin enables environments: %w", ErrEnvironmentsDisabled)}
	}
	if host && s.ManagedSandboxOnly {
		return &errcode.Error{Reason: reasonManagedSandboxOnly,
			Message: fmt.Sprintf("Only managed sandboxes may be targets in this instance, and %s is a host driver: choose a sandbox driver, or an instance admin turns off enableManagedSandboxOnly.", driver),
			Err:     fmt.Errorf("driver %q is a host driver and the instance setting enableManagedSandboxOnly is on (only managed sandboxes can be targets): %w", driver, ErrManagedSandboxOnly)}
	}
	return nil
}

// Reader reads the settings in force, for no principal: it is the hook
// berth.New builds with the System's Service for the environment gate
// (environment.Options.Settings), which reads it on every resolution,
// probe and lease acquisition; it keeps what it read for a second. Current returns Defaults when no record was ever written,
// and the store's error (never the defaults) when the read fails.
type Reader interface {
	Current(ctx context.Context) (Settings, error)
}

// The sentinel errors of the package.
var (
	// ErrEnvironmentsDisabled: Settings.EnableEnvironments is off, so no
	// environment can become a working target (CFG-9).
	ErrEnvironmentsDisabled error = &errcode.Error{Code: errcode.Unavailable, Reason: "environments_disabled", Err: errors.New("environments are disabled in this instance")}
	// ErrManagedSandboxOnly: Settings.ManagedSandboxOnly is on and the
	// target is a host driver's (CFG-9, CAP-3). Its text is
	// "managed_sandbox_only", the probe's result code
	// ("managed_sandbox_only").
	ErrManagedSandboxOnly error = &errcode.Error{Code: errcode.Unavailable, Reason: reasonManagedSandboxOnly, Err: errors.New(reasonManagedSandboxOnly)}
)
