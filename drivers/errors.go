package drivers

import (
	"github.com/berthdev/berth/drivers/config"

	"context"
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
// (ErrReleased). Code and CodeOf give the finer PRB-5 sub-code.
var (
	// ErrUnreachable: the target host or sandbox could not be reached (an
	// SSH host, a Daytona toolbox). A provider control plane that cannot be
	// reached (the Docker engine, the Daytona API) is ErrUnavailable.
	ErrUnreachable error = reasoned(errcode.Unreachable, CodeUnreachable, "target unreachable")
	// ErrTLSUnverified: a server certificate failed verification. It is an
	// identity failure, like a host key mismatch, and is never retried.
	ErrTLSUnverified error = reasoned(errcode.AuthFailed, CodeTLSUnverified, "tls certificate not verified")
	// ErrAuth: the target refused the credentials.
	ErrAuth error = reasoned(errcode.AuthFailed, CodeAuthFailed, "authentication failed")
	// ErrHostKeyMismatch: the host offered a key other than the one trusted for it.
	ErrHostKeyMismatch error = reasoned(errcode.AuthFailed, CodeHostKeyMismatch, "host key mismatch")
	// ErrHostKeyUnknown: no trusted key is configured for the host.
	ErrHostKeyUnknown error = reasoned(errcode.AuthFailed, CodeHostKeyUnknown, "host key unknown")
	// ErrImageNotFound: the configured image or snapshot does not exist.
	ErrImageNotFound error = reasoned(errcode.NotFound, CodeImageNotFound, "image not found")
	// ErrImageInactive: the provider reports the pinned snapshot inactive
	// (idle too long). It still exists, so it does not invalidate a
	// qualification; reactivating it by id makes it usable again.
	ErrImageInactive error = reasoned(errcode.Unavailable, CodeImageInactive, "image inactive")
	// ErrTransient: a failure worth retrying (rate limit, state change in
	// progress, connection reset, provider 5xx). Its Transient method
	// returns true, which is how internal/retry's default classifier knows
	// it without importing this package; its code is errcode.Unavailable.
	ErrTransient error = transientError{}
	// ErrUnsupported: the driver does not offer the operation.
	ErrUnsupported error = reasoned(errcode.Unsupported, CodeUnsupported, "unsupported")
	// ErrUnavailable: the provider cannot be used now: its control plane
	// (Docker engine, Daytona API) cannot be reached or refuses service, the
	// driver is not registered, or a test-only driver is used outside test
	// mode.
	ErrUnavailable error = reasoned(errcode.Unavailable, CodeProviderUnavailable, "provider unavailable")
	// ErrTimeout: the provider gave up on an operation within its own time
	// limit (distinct from the caller's context deadline).
	ErrTimeout error = reasoned(errcode.Timeout, CodeTimeout, "timed out")
	// ErrReleased: the sandbox handle was already released.
	ErrReleased error = &errcode.Error{Code: errcode.Conflict, Reason: "released", Err: errors.New("sandbox released")}
	// ErrInUse: the provider refused to remove something (a template's
	// image or snapshot) that sandboxes still use; retry once they are gone.
	ErrInUse error = &errcode.Error{Code: errcode.Conflict, Reason: "in_use", Err: errors.New("in use")}
)

// Code is the probe's stable, machine-readable failure code (PRB-5): what
// probe results (probe.Result.Code, probe.Stage.Code) and provider health
// records carry. It is a sub-code of an errcode.ErrorCode, finer where an
// operator needs more (host_key_mismatch and tls_unverified are auth_failed,
// provider_unavailable and image_inactive are unavailable); ErrorCode maps
// it into the set. The mapping from errors to codes lives only in CodeOf;
// the probe sets CodeCleanupFailed, CodePlatformUnknown, CodeArchived,
// CodeManagedSandboxOnly and CodeEnvironmentsDisabled from what it saw.
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
	// CodeInternal is CodeOf's code for an error that no driver sentinel
	// classifies.
	CodeInternal Code = "internal"
	// CodePlatformUnknown: the target ran the detection script, but its
	// output did not say which OS and architecture it is (set by the
	// probe).
	CodePlatformUnknown Code = "platform_unknown"
	// CodeArchived: the environment is archived; it is not probed (set by
	// the probe).
	CodeArchived Code = "archived"
	// CodeManagedSandboxOnly: the target is a host driver's and the
	// instance settings allow managed sandboxes only (CFG-9, CAP-3; set by
	// the probe).
	CodeManagedSandboxOnly Code = "managed_sandbox_only"
	// CodeEnvironmentsDisabled: the instance settings disable environments
	// (CFG-9; set by the probe).
	CodeEnvironmentsDisabled Code = "environments_disabled"
)

// ErrorCode returns the code of errcode's set that c is a sub-code of:
// OK for CodeOK; AuthFailed for auth_failed, host_key_mismatch,
// host_key_unknown and tls_unverified; Invalid for missing_credentials and
// invalid_config; NotFound for not_found and image_not_found; Unavailable
// for provider_unavailable, image_inactive, transient, cleanup_failed
// (the sweep retries it), managed_sandbox_only and environments_disabled;
// Unsupported for unsupported and platform_unknown;
// Conflict for archived; Unreachable, Timeout and Canceled (cancelled) for
// their own; and Unknown for internal (an error no sentinel classifies) and
// for a string that is none of the codes. For every driver sentinel,
// CodeOf(err).ErrorCode() == errcode.Code(err).
func (c Code) ErrorCode() errcode.ErrorCode {
	switch c {
	case CodeOK:
		return errcode.OK
	case CodeAuthFailed, CodeHostKeyMismatch, CodeHostKeyUnknown, CodeTLSUnverified:
		return errcode.AuthFailed
	case CodeMissingCredentials, CodeInvalidConfig:
		return errcode.Invalid
	case CodeNotFound, CodeImageNotFound:
		return errcode.NotFound
	case CodeProviderUnavailable, CodeImageInactive, CodeTransient, CodeCleanupFailed,
		CodeManagedSandboxOnly, CodeEnvironmentsDisabled:
		return errcode.Unavailable
	case CodeUnsupported, CodePlatformUnknown:
		return errcode.Unsupported
	case CodeArchived:
		return errcode.Conflict
	case CodeUnreachable:
		return errcode.Unreachable
	case CodeTimeout:
		return errcode.Timeout
	case CodeCancelled:
		return errcode.Canceled
	}
	return errcode.Unknown
}

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
	case errors.Is(err, config.ErrCredentialsMissing):
		return CodeMissingCredentials
	case errors.Is(err, ErrImageInactive):
		return CodeImageInactive
	case errors.Is(err, ErrImageNotFound):
		return CodeImageNotFound
	case errors.Is(err, config.ErrInvalid):
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
	case errors.Is(err, errcode.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrTransient):
		return CodeTransient
	default:
		return CodeInternal
	}
}

// transientReason gives ErrTransient its reason (and errcode's
// ErrUnavailable).
var transientReason = &errcode.Error{Code: errcode.Unavailable, Reason: string(CodeTransient)}

// transientError is the type of ErrTransient.
type transientError struct{}

func (transientError) Error() string                { return "transient failure" }
func (transientError) Unwrap() error                { return transientReason }
func (transientError) Transient() bool              { return true }
func (transientError) ErrorCode() errcode.ErrorCode { return errcode.Unavailable }

// reasoned returns a sentinel of the driver contract: an *errcode.Error of
// code with reason r, whose text is text; errors.Is matches it to
// errcode's sentinel of code as well as to itself.
func reasoned(code errcode.ErrorCode, r Code, text string) error {
	return &errcode.Error{Code: code, Reason: string(r), Err: errors.New(text)}
}
