package qualification

import (
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
)

// Code is a stable, machine-readable diagnostic code. Codes never change
// meaning; messages may be reworded. A diagnostic is not an error, but a
// host that reports a qualification that was not recorded or does not
// apply as one has its errcode.ErrorCode from ErrorCode: Code is a
// sub-code of errcode's set.
type Code string

// The codes of a probe's Diagnostic (why a qualification was or was not
// recorded, in the order of the QUAL-1 conditions) and of a View (whether
// a stored record applies to the environment as configured now).
const (
	// CodeRecorded: every condition held; a record was made.
	CodeRecorded Code = "recorded"
	// CodeNotSaved: the environment is a draft or was deleted (PRB-4).
	CodeNotSaved Code = "not_saved"
	// CodeNoCompany: no company to bind the record to (QUAL-4).
	CodeNoCompany Code = "no_company"
	// CodeNoFingerprint: the subject carries no config fingerprint.
	CodeNoFingerprint Code = "no_fingerprint"
	// CodeImageNotPinned: a mutable tag, a provider default or a snapshot
	// known only by name (QUAL-5).
	CodeImageNotPinned Code = "image_not_pinned"
	// CodeIdentityNotReported: the live sandbox did not report its image.
	CodeIdentityNotReported Code = "identity_not_reported"
	// CodeIdentityMismatch: the live sandbox runs another image than the
	// configured one.
	CodeIdentityMismatch Code = "identity_mismatch"
	// CodePlatformNotMeasured: no (valid) platform measurement.
	CodePlatformNotMeasured Code = "platform_not_measured"
	// CodeCleanupNotConfirmed: the probe lease's release was not confirmed.
	CodeCleanupNotConfirmed Code = "cleanup_not_confirmed"
	// CodeIncompleteEvidence: the evidence lacks the probe lease id or time.
	CodeIncompleteEvidence Code = "incomplete_evidence"

	// CodeQualified: the record applies to the environment as configured
	// now.
	CodeQualified Code = "qualified"
	// CodeNoRecord: there is no record for the company and environment.
	CodeNoRecord Code = "no_record"
	// CodeOtherCompany: the record was made for another company (QUAL-4).
	CodeOtherCompany Code = "other_company"
	// CodeOtherEnvironment: the record was made for another environment.
	CodeOtherEnvironment Code = "other_environment"
	// CodeStale: target, account, image or template changed since the
	// record was made (QUAL-3); a stale record is never reused.
	CodeStale Code = "stale_fingerprint"
	// CodeInvalidated: a later probe found the qualified identity gone at
	// the provider (QUAL-3); the reason and time say what and when.
	CodeInvalidated Code = "invalidated"

	// CodeRecordFailed: every QUAL-1 condition held but storing the record
	// failed (set by the probe).
	CodeRecordFailed Code = "record_failed"
	// CodeHostTarget: a host target (local, ssh) has no image to qualify;
	// nothing is recorded (PRB-6; set by the probe).
	CodeHostTarget Code = "host_target"
	// CodeProbeFailed: a stage failed before the evidence was complete;
	// the message names the stage and its code (set by the probe).
	CodeProbeFailed Code = "probe_failed"
)

// ErrorCode returns the code of errcode's set that c is a sub-code of: OK
// for recorded, qualified and a runtime verdict's ok; NotFound when no record applies to the
// company and environment (no_record, other_company, other_environment: a
// record of another tenant is reported as missing); Invalid for a subject
// that lacks what a record needs (no_company, no_fingerprint) and for an
// artifact that lists no platform (no_requirements); Unsupported for a
// runtime verdict that the artifact does not run on the platform
// (unsupported_platform, libc_mismatch, libc_too_old, libc_unknown);
// Unavailable when storing the record failed (record_failed); Conflict for
// every other code (a QUAL-1 condition that did not hold, a stale or
// invalidated record); Unknown for a string that is none of the codes.
func (c Code) ErrorCode() errcode.ErrorCode {
	switch c {
	case CodeRecorded, CodeQualified, verdictOK:
		return errcode.OK
	case CodeNoRecord, CodeOtherCompany, CodeOtherEnvironment:
		return errcode.NotFound
	case CodeNoCompany, CodeNoFingerprint, verdictNoRequirements:
		return errcode.Invalid
	case verdictUnsupportedPlatform, verdictLibcMismatch, verdictLibcTooOld, verdictLibcUnknown:
		return errcode.Unsupported
	case CodeRecordFailed:
		return errcode.Unavailable
	case CodeNotSaved, CodeImageNotPinned, CodeIdentityNotReported, CodeIdentityMismatch,
		CodePlatformNotMeasured, CodeCleanupNotConfirmed, CodeIncompleteEvidence,
		CodeStale, CodeInvalidated, CodeHostTarget, CodeProbeFailed:
		return errcode.Conflict
	}
	return errcode.Unknown
}

// Diagnostic says why a probe did or did not record a qualification
// (probe.Result.QualificationDiagnostic): a stable code and a human message.
// Messages name images and fields, never secret values.
type Diagnostic struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// String returns "code: message".
func (d Diagnostic) String() string { return string(d.Code) + ": " + d.Message }

// Record is a recorded qualification (QUAL-2), as a Store keeps it. Only
// the library writes one (CFG-5); it applies only to the company,
// environment, fingerprint, image and template it names, and never once
// invalidated (a View says whether it applies now).
type Record struct {
	Company     string          `json:"company"`
	Environment string          `json:"environment"`
	Fingerprint string          `json:"fingerprint"`
	Image       images.Identity `json:"image"`
	// Template is the active captured template identity, "" for none.
	Template string   `json:"template,omitempty"`
	Platform Platform `json:"platform"`
	// LeaseID is the probe lease id: private, never shown in a View.
	LeaseID    string    `json:"leaseId"`
	RecordedAt time.Time `json:"recordedAt"`
	// InvalidatedAt is when a later probe found the qualified identity gone
	// at the provider (QUAL-3); zero while the record stands. An
	// invalidated record is never valid, whatever its fingerprint.
	InvalidatedAt time.Time `json:"invalidatedAt,omitzero"`
	// InvalidReason says what the provider reported; "" while the record
	// stands. It names the identity, never a secret.
	InvalidReason string `json:"invalidReason,omitempty"`
}

// Invalidate returns r marked invalid at at for reason: the provider said
// the qualified identity is gone (a deleted snapshot, a removed image). An
// identity the provider reports inactive is not gone and does not
// invalidate a record. The platform and time of the original record are
// kept for the record's history; it never applies again.
func (r Record) Invalidate(reason string, at time.Time) Record {
	r.InvalidatedAt, r.InvalidReason = at.UTC(), reason
	return r
}
