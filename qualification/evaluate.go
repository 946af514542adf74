package qualification

import (
	"fmt"
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

// Codes of Evaluate (why a qualification was or was not recorded, in the
// order of the QUAL-1 conditions) and of Valid.
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

	// CodeQualified: Valid found the record applies to the current subject.
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
	case CodeRecorded, CodeQualified, VerdictOK:
		return errcode.OK
	case CodeNoRecord, CodeOtherCompany, CodeOtherEnvironment:
		return errcode.NotFound
	case CodeNoCompany, CodeNoFingerprint, VerdictNoRequirements:
		return errcode.Invalid
	case VerdictUnsupportedPlatform, VerdictLibcMismatch, VerdictLibcTooOld, VerdictLibcUnknown:
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

// Diagnostic says why a qualification was or was not recorded (Evaluate),
// or whether a record applies (Valid): a stable code and a human message.
// Messages name images and fields, never secret values.
type Diagnostic struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// OK reports whether the diagnostic is CodeRecorded or CodeQualified.
func (d Diagnostic) OK() bool { return d.Code == CodeRecorded || d.Code == CodeQualified }

// String returns "code: message".
func (d Diagnostic) String() string { return string(d.Code) + ": " + d.Message }

// Subject is the environment being qualified, as it is configured now, for
// the company that asks.
type Subject struct {
	// Company is the tenant the qualification is for (QUAL-4).
	Company string
	// Environment is the environment id.
	Environment string
	// Saved is false for a draft config (PRB-4) and for a deleted
	// environment.
	Saved bool
	// Fingerprint is the current config fingerprint (see Fingerprint).
	Fingerprint string
	// Image is the configured image; the zero Reference is a provider
	// default. Only a pinned Reference qualifies (QUAL-5).
	Image images.Reference
	// Template is the identity of the active captured template, "" for none.
	Template string
}

// Evidence is what a saved sandbox probe observed (PRB-3).
type Evidence struct {
	// LiveImage is the image identity the live sandbox reported; zero if it
	// reported none.
	LiveImage images.Identity
	// Platform is the measured platform; the zero Platform if it was not
	// measured. Evaluate normalizes it.
	Platform Platform
	// CleanupConfirmed is true only when the provider confirmed the probe
	// lease's sandbox stopped or destroyed (LEASE-7).
	CleanupConfirmed bool
	// LeaseID is the probe lease's id.
	LeaseID string
	// At is when the probe observed this.
	At time.Time
}

// Record is a recorded qualification (QUAL-2). Only the library writes one
// (CFG-5); it is valid only while Valid says so.
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

// Invalidated reports whether a probe invalidated r (see Invalidate).
func (r Record) Invalidated() bool { return !r.InvalidatedAt.IsZero() }

// Invalidate returns r marked invalid at at for reason: the provider said
// the qualified identity is gone (a deleted snapshot, a removed image). An
// identity the provider reports inactive is not gone and does not
// invalidate a record. The platform and time of the original record are
// kept for the record's history; Valid never accepts it again.
func (r Record) Invalidate(reason string, at time.Time) Record {
	r.InvalidatedAt, r.InvalidReason = at.UTC(), reason
	return r
}

// IsZero reports whether r is the zero Record (no record).
func (r Record) IsZero() bool { return r == Record{} }

// Evaluate decides whether the probe's evidence qualifies the subject
// (QUAL-1). It returns a Record and a CodeRecorded diagnostic when the
// environment is saved, its image is pinned, the live sandbox reported that
// same identity, the platform was measured and cleanup was confirmed.
// Otherwise it returns the zero Record and a diagnostic naming the first
// condition that failed, in that order. It is pure.
func Evaluate(s Subject, ev Evidence) (Record, Diagnostic) {
	fail := func(c Code, format string, args ...any) (Record, Diagnostic) {
		return Record{}, Diagnostic{Code: c, Message: fmt.Sprintf(format, args...)}
	}
	if !s.Saved || s.Environment == "" {
		return fail(CodeNotSaved, "the environment is not saved: a draft probe never records a qualification")
	}
	if s.Company == "" {
		return fail(CodeNoCompany, "no company: a qualification is recorded for one company")
	}
	if s.Fingerprint == "" {
		return fail(CodeNoFingerprint, "no config fingerprint for environment %s", s.Environment)
	}
	want, ok := s.Image.Identity()
	if !ok {
		return fail(CodeImageNotPinned, "%s", notPinnedMessage(s.Image))
	}
	if ev.LiveImage.IsZero() {
		return fail(CodeIdentityNotReported, "the live sandbox did not report its image identity; expected %s", want)
	}
	if ev.LiveImage != want {
		return fail(CodeIdentityMismatch, "the live sandbox runs %s, but the environment is configured with %s", ev.LiveImage, want)
	}
	p := ev.Platform.Normalize()
	if !p.Measured() {
		return fail(CodePlatformNotMeasured, "the platform (os, arch, libc) was not measured")
	}
	if err := p.Validate(); err != nil {
		return fail(CodePlatformNotMeasured, "the platform measurement is not usable: %v", err)
	}
	if !ev.CleanupConfirmed {
		return fail(CodeCleanupNotConfirmed, "the probe lease's cleanup was not confirmed by the provider; the lease is pending cleanup")
	}
	if ev.LeaseID == "" || ev.At.IsZero() {
		return fail(CodeIncompleteEvidence, "the evidence lacks the probe lease id or the probe time")
	}
	rec := Record{
		Company:     s.Company,
		Environment: s.Environment,
		Fingerprint: s.Fingerprint,
		Image:       want,
		Template:    s.Template,
		Platform:    p,
		LeaseID:     ev.LeaseID,
		RecordedAt:  ev.At,
	}
	return rec, Diagnostic{Code: CodeRecorded, Message: fmt.Sprintf("qualified %s on %s", want, p)}
}

func notPinnedMessage(r images.Reference) string {
	switch r.Kind() {
	case images.RefNone:
		return "no image is configured: a provider default image never qualifies; configure repo@sha256:<digest> or a provider snapshot id"
	case images.RefTag:
		return fmt.Sprintf("image %q is a mutable tag: pin it by digest (repo@sha256:...) to qualify", r.String())
	case images.RefSnapshotName:
		return fmt.Sprintf("snapshot %q is known only by its name: reference it by its provider id to qualify", r.SnapshotName())
	default:
		return fmt.Sprintf("image %q is not pinned", r.String())
	}
}

// Valid reports whether rec qualifies the current subject (QUAL-3, QUAL-4):
// only for the same company and environment, while the environment is
// saved, and while the current fingerprint equals the recorded one. A stale
// record is never reused. The diagnostic is CodeQualified when valid, else
// says why not.
func Valid(rec Record, cur Subject) (bool, Diagnostic) {
	no := func(c Code, format string, args ...any) (bool, Diagnostic) {
		return false, Diagnostic{Code: c, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case rec.IsZero():
		return no(CodeNoRecord, "no qualification is recorded; probe the saved environment with a pinned image")
	case rec.Company != cur.Company:
		return no(CodeOtherCompany, "the qualification was recorded for another company")
	case rec.Environment != cur.Environment:
		return no(CodeOtherEnvironment, "the qualification was recorded for another environment")
	case !cur.Saved:
		return no(CodeNotSaved, "the environment is not saved")
	case rec.Fingerprint != cur.Fingerprint:
		return no(CodeStale, "the target, account, image or template changed since the qualification; probe again")
	case rec.Template != cur.Template:
		return no(CodeStale, "the active template changed since the qualification; probe again")
	}
	want, ok := cur.Image.Identity()
	if !ok {
		return no(CodeImageNotPinned, "%s", notPinnedMessage(cur.Image))
	}
	if want != rec.Image {
		return no(CodeStale, "the image changed since the qualification; probe again")
	}
	if rec.Invalidated() {
		return no(CodeInvalidated, "invalidated at %s: %s", rec.InvalidatedAt.UTC().Format(time.RFC3339), rec.InvalidReason)
	}
	return true, Diagnostic{Code: CodeQualified, Message: fmt.Sprintf("qualified on %s at %s", rec.Platform, rec.RecordedAt.UTC().Format(time.RFC3339))}
}
