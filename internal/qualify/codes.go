package qualify

import "github.com/berthdev/berth/errcode"

// The codes of a qualification.Diagnostic (why a probe did or did not
// record a qualification, in the order of the QUAL-1 conditions) and of a
// qualification.View (whether a stored record applies to the environment
// as configured now). They are reasons (docs/errors.md): stored records
// and the API carry the strings, which never change.
const (
	// Recorded: every condition held; a record was made.
	Recorded = "recorded"
	// NotSaved: the environment is a draft or was deleted (PRB-4).
	NotSaved = "not_saved"
	// NoCompany: no company to bind the record to (QUAL-4).
	NoCompany = "no_company"
	// NoFingerprint: the subject carries no config fingerprint.
	NoFingerprint = "no_fingerprint"
	// ImageNotPinned: a mutable tag, a provider default or a snapshot known
	// only by name (QUAL-5).
	ImageNotPinned = "image_not_pinned"
	// IdentityNotReported: the live sandbox did not report its image.
	IdentityNotReported = "identity_not_reported"
	// IdentityMismatch: the live sandbox runs another image than the
	// configured one.
	IdentityMismatch = "identity_mismatch"
	// PlatformNotMeasured: no (valid) platform measurement.
	PlatformNotMeasured = "platform_not_measured"
	// IsolationMismatch: the probe measured less isolation inside the
	// sandbox than the target declares (or measured none it could prove);
	// the probe's result code of the same name.
	IsolationMismatch = "isolation_mismatch"
	// CleanupNotConfirmed: the probe lease's release was not confirmed.
	CleanupNotConfirmed = "cleanup_not_confirmed"
	// IncompleteEvidence: the evidence lacks the probe lease id or time.
	IncompleteEvidence = "incomplete_evidence"

	// Qualified: the record applies to the environment as configured now.
	Qualified = "qualified"
	// NoRecord: there is no record for the company and environment.
	NoRecord = "no_record"
	// OtherCompany: the record was made for another company (QUAL-4).
	OtherCompany = "other_company"
	// OtherEnvironment: the record was made for another environment.
	OtherEnvironment = "other_environment"
	// Stale: target, account, image or template changed since the record
	// was made (QUAL-3); a stale record is never reused.
	Stale = "stale_fingerprint"
	// Invalidated: a later probe found the qualified identity gone at the
	// provider (QUAL-3).
	Invalidated = "invalidated"

	// RecordFailed: every QUAL-1 condition held but storing the record
	// failed (set by the probe).
	RecordFailed = "record_failed"
	// HostTarget: a host target (local, ssh) has no image to qualify;
	// nothing is recorded (PRB-6; set by the probe).
	HostTarget = "host_target"
	// ProbeFailed: a stage failed before the evidence was complete; the
	// message names the stage and its code (set by the probe).
	ProbeFailed = "probe_failed"
)

// The codes of a qualification.Verdict (qualification.CanRun), as the
// qualification package sets them.
const (
	verdictOK                  = "ok"
	verdictNoRequirements      = "no_requirements"
	verdictUnsupportedPlatform = "unsupported_platform"
	verdictLibcMismatch        = "libc_mismatch"
	verdictLibcTooOld          = "libc_too_old"
	verdictLibcUnknown         = "libc_unknown"
)

// Codes lists every code of this file, the verdicts' included, for the
// tests that check each is documented and maps to a code.
var Codes = []string{Recorded, NotSaved, NoCompany, NoFingerprint, ImageNotPinned, IdentityNotReported,
	IdentityMismatch, PlatformNotMeasured, IsolationMismatch, CleanupNotConfirmed, IncompleteEvidence, Qualified, NoRecord,
	OtherCompany, OtherEnvironment, Stale, Invalidated, RecordFailed, HostTarget, ProbeFailed,
	verdictOK, verdictNoRequirements, verdictUnsupportedPlatform, verdictLibcMismatch, verdictLibcTooOld, verdictLibcUnknown}

// ErrorCode returns the code of errcode's set that the qualification code
// c is finer than: OK for recorded, qualified and a verdict's ok; NotFound
// when no record applies to the company and environment (no_record,
// other_company, other_environment: a record of another tenant is
// reported as missing); Invalid for a subject that lacks what a record
// needs (no_company, no_fingerprint) and for an artifact that lists no
// platform (no_requirements); Unsupported for a verdict that the artifact
// does not run on the platform (unsupported_platform, libc_mismatch,
// libc_too_old, libc_unknown); Unavailable when storing the record failed
// (record_failed); Conflict for every other code (a QUAL-1 condition that
// did not hold, a stale or invalidated record); Unknown for a string that
// is none of the codes.
func ErrorCode(c string) errcode.ErrorCode {
	switch c {
	case Recorded, Qualified, verdictOK:
		return errcode.OK
	case NoRecord, OtherCompany, OtherEnvironment:
		return errcode.NotFound
	case NoCompany, NoFingerprint, verdictNoRequirements:
		return errcode.Invalid
	case verdictUnsupportedPlatform, verdictLibcMismatch, verdictLibcTooOld, verdictLibcUnknown:
		return errcode.Unsupported
	case RecordFailed:
		return errcode.Unavailable
	case NotSaved, ImageNotPinned, IdentityNotReported, IdentityMismatch,
		PlatformNotMeasured, IsolationMismatch, CleanupNotConfirmed, IncompleteEvidence,
		Stale, Invalidated, HostTarget, ProbeFailed:
		return errcode.Conflict
	}
	return errcode.Unknown
}
