// Package reason holds the reasons that berth's probe, provider health and
// driver contract share (docs/errors.md lists them; they are API as
// strings, never as Go names): the stable codes of probe results and
// provider health records (PRB-5), Of, which classifies a driver error
// into one, and Code, which maps one into errcode's set. The strings never
// change: stored records and the API carry them.
package reason

import (
	"context"
	"errors"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// The probe's stable codes. The driver contract's sentinels carry the
// same strings as their reasons (errcode.ReasonOf).
const (
	OK                  = "ok"
	Unreachable         = "unreachable"
	AuthFailed          = "auth_failed"
	HostKeyMismatch     = "host_key_mismatch"
	HostKeyUnknown      = "host_key_unknown"
	MissingCredentials  = "missing_credentials"
	ImageNotFound       = "image_not_found"
	ImageInactive       = "image_inactive"
	TLSUnverified       = "tls_unverified"
	NotFound            = "not_found"
	Timeout             = "timeout"
	Cancelled           = "cancelled"
	ProviderUnavailable = "provider_unavailable"
	Unsupported         = "unsupported"
	InvalidConfig       = "invalid_config"
	Transient           = "transient"
	// CleanupFailed: the probe lease's cleanup was not confirmed (set by
	// the probe, which knows the failing step).
	CleanupFailed = "cleanup_failed"
	// Internal is Of's code for an error that no driver sentinel
	// classifies.
	Internal = "internal"
	// PlatformUnknown: the target ran the detection script, but its output
	// did not say which OS and architecture it is (set by the probe).
	PlatformUnknown = "platform_unknown"
	// Archived: the environment is archived; it is not probed (set by the
	// probe).
	Archived = "archived"
	// ManagedSandboxOnly: the target is a host driver's and the instance
	// settings allow managed sandboxes only (set by the probe).
	ManagedSandboxOnly = "managed_sandbox_only"
	// EnvironmentsDisabled: the instance settings disable environments
	// (set by the probe).
	EnvironmentsDisabled = "environments_disabled"
	// IsolationMismatch: the probe measured less isolation inside the
	// sandbox than its target declares (set by the probe; the
	// qualification diagnostic of the same name).
	IsolationMismatch = "isolation_mismatch"
	// IsolationBelowMinimum: the target declares less isolation than the
	// instance's minimumIsolation or the environment's requireIsolation
	// (the reason of the instance settings' refusal).
	IsolationBelowMinimum = "isolation_below_minimum"
)

// Code returns the code of errcode's set that the probe code r is finer
// than: OK for ok; AuthFailed for auth_failed, host_key_mismatch,
// host_key_unknown and tls_unverified; Invalid for missing_credentials and
// invalid_config; NotFound for not_found and image_not_found; Unavailable
// for provider_unavailable, image_inactive, transient, cleanup_failed (the
// sweep retries it), managed_sandbox_only, environments_disabled and
// isolation_below_minimum; Unsupported for unsupported and
// platform_unknown; Conflict for archived and isolation_mismatch;
// Unreachable, Timeout and Canceled (cancelled) for their own; and Unknown
// for internal (an error no sentinel classifies) and for a string that is
// none of the codes. For every driver sentinel, Code(Of(err)) ==
// errcode.Code(err).
func Code(r string) errcode.ErrorCode {
	switch r {
	case OK:
		return errcode.OK
	case AuthFailed, HostKeyMismatch, HostKeyUnknown, TLSUnverified:
		return errcode.AuthFailed
	case MissingCredentials, InvalidConfig:
		return errcode.Invalid
	case NotFound, ImageNotFound:
		return errcode.NotFound
	case ProviderUnavailable, ImageInactive, Transient, CleanupFailed, ManagedSandboxOnly, EnvironmentsDisabled, IsolationBelowMinimum:
		return errcode.Unavailable
	case Unsupported, PlatformUnknown:
		return errcode.Unsupported
	case Archived, IsolationMismatch:
		return errcode.Conflict
	case Unreachable:
		return errcode.Unreachable
	case Timeout:
		return errcode.Timeout
	case Cancelled:
		return errcode.Canceled
	}
	return errcode.Unknown
}

// Of maps an error to its stable probe code: nil maps to OK and an error
// that matches no sentinel to Internal. Cleanup failures are classified by
// the caller that knows the failing step (CleanupFailed).
func Of(err error) string {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, drivers.ErrHostKeyMismatch):
		return HostKeyMismatch
	case errors.Is(err, drivers.ErrHostKeyUnknown):
		return HostKeyUnknown
	case errors.Is(err, drivers.ErrTLSUnverified):
		return TLSUnverified
	case errors.Is(err, drivers.ErrAuth):
		return AuthFailed
	case errors.Is(err, config.ErrCredentialsMissing):
		return MissingCredentials
	case errors.Is(err, drivers.ErrImageInactive):
		return ImageInactive
	case errors.Is(err, drivers.ErrImageNotFound):
		return ImageNotFound
	case errors.Is(err, config.ErrInvalid):
		return InvalidConfig
	case errors.Is(err, drivers.ErrUnavailable):
		return ProviderUnavailable
	case errors.Is(err, drivers.ErrUnsupported):
		return Unsupported
	case errors.Is(err, drivers.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return Timeout
	case errors.Is(err, context.Canceled):
		return Cancelled
	case errors.Is(err, drivers.ErrUnreachable):
		return Unreachable
	case errors.Is(err, errcode.ErrNotFound):
		return NotFound
	case errors.Is(err, drivers.ErrTransient):
		return Transient
	default:
		return Internal
	}
}
