package drivers

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Every driver returns these, wrapped with context that
// names the target (never a secret), so that callers test them with errors.Is.
var (
	// ErrUnreachable: the target host or sandbox could not be reached (an
	// SSH host, a Daytona toolbox). A provider control plane that cannot be
	// reached (the Docker engine, the Daytona API) is ErrUnavailable.
	ErrUnreachable = errors.New("target unreachable")
	// ErrTLSUnverified: a server certificate failed verification. It is an
	// identity failure, like a host key mismatch, and is never retried.
	ErrTLSUnverified = errors.New("tls certificate not verified")
	// ErrAuth: the target refused the credentials.
	ErrAuth = errors.New("authentication failed")
	// ErrHostKeyMismatch: the host offered a key other than the one trusted for it.
	ErrHostKeyMismatch = errors.New("host key mismatch")
	// ErrHostKeyUnknown: no trusted key is configured for the host.
	ErrHostKeyUnknown = errors.New("host key unknown")
	// ErrCredentialsMissing: the config lacks a credential the driver needs.
	ErrCredentialsMissing = errors.New("credentials missing")
	// ErrImageNotFound: the configured image or snapshot does not exist.
	ErrImageNotFound = errors.New("image not found")
	// ErrImageInactive: the provider reports the pinned snapshot inactive
	// (idle too long). It still exists, so it does not invalidate a
	// qualification; reactivating it by id makes it usable again.
	ErrImageInactive = errors.New("image inactive")
	// ErrNotFound: the sandbox (or other named object) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrTransient: a failure worth retrying (rate limit, state change in
	// progress, connection reset, provider 5xx). Its Transient method
	// returns true, which is how internal/retry's default classifier knows
	// it without importing this package.
	ErrTransient error = transientError{}
	// ErrUnsupported: the driver does not offer the operation.
	ErrUnsupported = errors.New("unsupported")
	// ErrUnavailable: the provider cannot be used now: its control plane
	// (Docker engine, Daytona API) cannot be reached or refuses service, the
	// driver is not registered, or a test-only driver is used outside test
	// mode.
	ErrUnavailable = errors.New("provider unavailable")
	// ErrTimeout: the provider gave up on an operation within its own time
	// limit (distinct from the caller's context deadline).
	ErrTimeout = errors.New("timed out")
	// ErrInvalidConfig: a config failed schema validation; see ConfigError.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrReleased: the sandbox handle was already released.
	ErrReleased = errors.New("sandbox released")
)

// ConfigError reports one invalid config field. It wraps ErrInvalidConfig.
// Reason never contains the field's value when the field is a secret.
type ConfigError struct {
	Driver string // driver name
	Field  string // field name; "" for an error about the whole config
	Reason string

	missingSecret bool
}

// Error returns "DRIVER config: field "NAME": REASON" (without the field
// part for an error about the whole config). It never contains a secret.
func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s config: %s", e.Driver, e.Reason)
	}
	return fmt.Sprintf("%s config: field %q: %s", e.Driver, e.Field, e.Reason)
}

// Unwrap returns ErrInvalidConfig, and also ErrCredentialsMissing when the
// error is a required Secret field that is absent.
func (e *ConfigError) Unwrap() []error {
	if e.missingSecret {
		return []error{ErrInvalidConfig, ErrCredentialsMissing}
	}
	return []error{ErrInvalidConfig}
}

// Code is a stable, machine-readable error code for probe results and API
// errors. The mapping from errors to codes lives only in CodeOf.
type Code string

// The stable codes.
const (
	CodeOK                  Code = "ok"
	CodeUnreachable         Code = "unreachable"
	CodeAuthFailed          Code = "auth_failed"
	CodeHostKeyMismatch     Code = "host_key_mismatch"
	CodeHostKeyUnknown      Code = "host_key_unknown"
	CodeMissingCredentials  Code = "missing_credentials"
	CodeImageNotFound       Code = "image_not_found"
	CodeImageInactive       Code = "image_inactive"
	CodeTLSUnverified       Code = "tls_unverified"
	CodeNotFound            Code = "not_found"
	CodeTimeout             Code = "timeout"
	CodeCancelled           Code = "cancelled"
	CodeProviderUnavailable Code = "provider_unavailable"
	CodeUnsupported         Code = "unsupported"
	CodeInvalidConfig       Code = "invalid_config"
	CodeTransient           Code = "transient"
	CodeCleanupFailed       Code = "cleanup_failed"
	CodeInternal            Code = "internal"
)

// CodeOf maps an error to its stable code; nil maps to CodeOK and an error
// that matches no sentinel to CodeInternal. Cleanup failures are classified
// by the caller that knows the failing step (CodeCleanupFailed).
func CodeOf(err error) Code {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, ErrHostKeyMismatch):
		return CodeHostKeyMismatch
	case errors.Is(err, ErrHostKeyUnknown):
		return CodeHostKeyUnknown
	case errors.Is(err, ErrTLSUnverified):
		return CodeTLSUnverified
	case errors.Is(err, ErrAuth):
		return CodeAuthFailed
	case errors.Is(err, ErrCredentialsMissing):
		return CodeMissingCredentials
	case errors.Is(err, ErrImageInactive):
		return CodeImageInactive
	case errors.Is(err, ErrImageNotFound):
		return CodeImageNotFound
	case errors.Is(err, ErrInvalidConfig):
		return CodeInvalidConfig
	case errors.Is(err, ErrUnavailable):
		return CodeProviderUnavailable
	case errors.Is(err, ErrUnsupported):
		return CodeUnsupported
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, context.Canceled):
		return CodeCancelled
	case errors.Is(err, ErrUnreachable):
		return CodeUnreachable
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrTransient):
		return CodeTransient
	default:
		return CodeInternal
	}
}

// transientError is the type of ErrTransient.
type transientError struct{}

func (transientError) Error() string   { return "transient failure" }
func (transientError) Transient() bool { return true }
