package qualification

import "time"

// View is the public read of an environment's qualification for one
// company (QUAL-7): qualified or not, why, and, only while qualified, the
// platform and time. It leaves out private metadata: the probe lease id,
// the fingerprint, provider internals. Building it does no I/O (CAP-1).
type View struct {
	Qualified bool   `json:"qualified"`
	Code      string `json:"code"`
	Reason    string `json:"reason"`
	// Platform and RecordedAt are set only when Qualified.
	Platform   *Platform  `json:"platform,omitempty"`
	RecordedAt *time.Time `json:"recordedAt,omitempty"`
	// Isolation is the level the qualifying probe measured inside the
	// sandbox (Record.Isolation); set only when Qualified, and "" for a
	// record made before the probe measured it.
	Isolation string `json:"isolation,omitempty"`
	// InvalidatedAt is set only when the record applies to the current
	// subject but a later probe found its identity gone ("invalidated").
	InvalidatedAt *time.Time `json:"invalidatedAt,omitempty"`
	// LastTest is the company's last probe of the environment, whatever it
	// found (nil when none was stored): a reader combines it with
	// Qualified to say whether the target works now.
	LastTest *LastTest `json:"lastTest,omitempty"`
}
