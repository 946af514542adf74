package drivers

import (
	"errors"

	"github.com/berthdev/berth/errcode"
)

// Sentinel errors. Every driver returns these, wrapped with context that
// names the target (never a secret), so that callers test them with errors.Is.
// Each carries its errcode.ErrorCode (errcode.Code finds it): unreachable,
// auth_failed (ErrAuth, ErrTLSUnverified, ErrHostKeyMismatch,
// ErrHostKeyUnknown), invalid (config.ErrCredentialsMissing and config.ErrInvalid of drivers/config),
// not_found (ErrImageNotFound, errcode.ErrNotFound), unavailable (ErrImageInactive,
// ErrTransient, ErrUnavailable), unsupported, timeout, and conflict
// (ErrReleased). errcode.ReasonOf gives the finer reason, the probe's
// stable code (docs/errors.md lists them).
var (
	// ErrUnreachable: the target host or sandbox could not be reached (an
	// SSH host, a Daytona toolbox). A provider control plane that cannot be
	// reached (the Docker engine, the Daytona API) is ErrUnavailable.
	ErrUnreachable error = reasoned(errcode.Unreachable, "unreachable", "target unreachable")
	// ErrTLSUnverified: a server certificate failed verification. It is an
	// identity failure, like a host key mismatch, and is never retried.
	ErrTLSUnverified error = reasoned(errcode.AuthFailed, "tls_unverified", "tls certificate not verified")
	// ErrAuth: the target refused the credentials.
	ErrAuth error = reasoned(errcode.AuthFailed, "auth_failed", "authentication failed")
	// ErrHostKeyMismatch: the host offered a key other than the one trusted for it.
	ErrHostKeyMismatch error = reasoned(errcode.AuthFailed, "host_key_mismatch", "host key mismatch")
	// ErrHostKeyUnknown: no trusted key is configured for the host.
	ErrHostKeyUnknown error = reasoned(errcode.AuthFailed, "host_key_unknown", "host key unknown")
	// ErrImageNotFound: the configured image or snapshot does not exist.
	ErrImageNotFound error = reasoned(errcode.NotFound, "image_not_found", "image not found")
	// ErrImageInactive: the provider reports the pinned snapshot inactive
	// (idle too long). It still exists, so it does not invalidate a
	// qualification; reactivating it by id makes it usable again.
	ErrImageInactive error = reasoned(errcode.Unavailable, "image_inactive", "image inactive")
	// ErrTransient: a failure worth retrying (rate limit, state change in
	// progress, connection reset, provider 5xx). Its Transient method
	// returns true, which is how internal/retry's default classifier knows
	// it without importing this package; its code is errcode.Unavailable.
	ErrTransient error = transientError{}
	// ErrUnsupported: the driver does not offer the operation.
	ErrUnsupported error = reasoned(errcode.Unsupported, "unsupported", "unsupported")
	// ErrUnavailable: the provider cannot be used now: its control plane
	// (Docker engine, Daytona API) cannot be reached or refuses service, the
	// driver is not registered, or a test-only driver is used outside test
	// mode.
	ErrUnavailable error = reasoned(errcode.Unavailable, "provider_unavailable", "provider unavailable")
	// ErrTimeout: the provider gave up on an operation within its own time
	// limit (distinct from the caller's context deadline).
	ErrTimeout error = reasoned(errcode.Timeout, "timeout", "timed out")
	// ErrReleased: the sandbox handle was already released.
	ErrReleased error = &errcode.Error{Code: errcode.Conflict, Reason: "released", Err: errors.New("sandbox released")}
	// ErrInUse: the provider refused to remove something (a template's
	// image or snapshot) that sandboxes still use; retry once they are gone.
	ErrInUse error = &errcode.Error{Code: errcode.Conflict, Reason: "in_use", Err: errors.New("in use")}
)

// transientReason gives ErrTransient its reason (and errcode's
// ErrUnavailable).
var transientReason = &errcode.Error{Code: errcode.Unavailable, Reason: "transient"}

// transientError is the type of ErrTransient.
type transientError struct{}

func (transientError) Error() string                { return "transient failure" }
func (transientError) Unwrap() error                { return transientReason }
func (transientError) Transient() bool              { return true }
func (transientError) ErrorCode() errcode.ErrorCode { return errcode.Unavailable }

// reasoned returns a sentinel of the driver contract: an *errcode.Error of
// code with reason r, whose text is text; errors.Is matches it to
// errcode's sentinel of code as well as to itself.
func reasoned(code errcode.ErrorCode, r, text string) error {
	return &errcode.Error{Code: code, Reason: r, Err: errors.New(text)}
}
