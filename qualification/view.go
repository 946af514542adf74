package qualification

import "time"

// View is the public read of an environment's qualification for one
// company (QUAL-7): qualified or not, why, and, only while qualified, the
// platform and time. It leaves out private metadata: the probe lease id,
// the fingerprint, provider internals. Building it does no I/O (CAP-1).
type View struct {
	Qualified bool   `json:"qualified"`
	Code      Code   `json:"code"`
	Reason    string `json:"reason"`
	// Platform and RecordedAt are set only when Qualified.
	Platform   *Platform  `json:"platform,omitempty"`
	RecordedAt *time.Time `json:"recordedAt,omitempty"`
	// InvalidatedAt is set only when the record applies to the current
	// subject but a later probe found its identity gone (CodeInvalidated).
	InvalidatedAt *time.Time `json:"invalidatedAt,omitempty"`
}

// NewView returns the view of rec (the zero Record when none is stored)
// for the current subject. A stale or foreign record shows as not
// qualified with the reason, never with its platform.
func NewView(rec Record, cur Subject) View {
	ok, d := Valid(rec, cur)
	v := View{Qualified: ok, Code: d.Code, Reason: d.Message}
	if ok {
		p, at := rec.Platform, rec.RecordedAt.UTC()
		v.Platform, v.RecordedAt = &p, &at
	}
	if d.Code == CodeInvalidated {
		at := rec.InvalidatedAt.UTC()
		v.InvalidatedAt = &at
	}
	return v
}
