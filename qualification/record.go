package qualification

import (
	"time"

	"github.com/berthdev/berth/images"
)

// Diagnostic says why a probe did or did not record a qualification
// (probe.Result.QualificationDiagnostic): a stable code and a human message.
// The codes are reasons listed in docs/errors.md ("recorded", "not_saved",
// "image_not_pinned", ..., "probe_failed") with the errcode code each is
// finer than; the strings never change.
// Messages name images and fields, never secret values.
type Diagnostic struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// String returns "code: message".
func (d Diagnostic) String() string { return d.Code + ": " + d.Message }

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
	// Isolation is the level the probe measured inside the sandbox
	// ("none", "container", "gvisor", "microvm"; drivers.Isolation's
	// names), "" for a record made before the probe measured it. A record
	// whose level is below what the target declares now does not apply
	// (an image qualified under runc is not qualified under runsc).
	Isolation string `json:"isolation,omitempty"`
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

// LastTest is the outcome of the last probe ("Test") of a saved
// environment for one company, as a Store keeps it beside the company's
// qualification record, so that it outlives the probe's caller: a page
// shows it after a reload, a CLI in another process reads it. Only the
// prober writes one (a draft probe never does). It holds no secret: the
// message is the probe result's one sentence, already scrubbed.
type LastTest struct {
	Company     string `json:"company"`
	Environment string `json:"environment"`
	// At is when the probe started.
	At time.Time `json:"at"`
	OK bool      `json:"ok"`
	// Code is the stable code of the failure (a reason of docs/errors.md),
	// or, when OK, the qualification diagnostic's code ("" for none).
	Code string `json:"code,omitempty"`
	// Message is one sentence for a person: the failure naming its
	// target, or, when OK, what was checked.
	Message string `json:"message"`
	// FailingSince is when the current run of failed tests began (At of the
	// first failure after the last success); zero when OK.
	FailingSince time.Time `json:"failingSince,omitzero"`
}
