// Package qualify holds the pure logic behind a qualification that only
// berth's own packages run: Evaluate and Valid over a Subject and the
// Evidence of a probe (QUAL-1..4), the public View of a record (QUAL-7),
// the config fingerprint (Fingerprint over a FingerprintInput), and the
// platform detection script with its parser (DetectScript,
// ParseDetection), shared by the probe, the runner and the fake driver.
// The value types hosts and stores read (Record, Platform, View,
// Diagnostic and its codes, the Store) stay in package qualification. It
// does no I/O.
package qualify

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/qualification"
)

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
	// Isolation is the level the target declares for its config now
	// (drivers.IsolationOf, by name: "none", "container", "gvisor",
	// "microvm"); "" counts as none.
	Isolation string
}

// Evidence is what a saved sandbox probe observed (PRB-3).
type Evidence struct {
	// LiveImage is the image identity the live sandbox reported; zero if it
	// reported none.
	LiveImage images.Identity
	// Platform is the measured platform; the zero Platform if it was not
	// measured. Evaluate normalizes it.
	Platform qualification.Platform
	// CleanupConfirmed is true only when the provider confirmed the probe
	// lease's sandbox stopped or destroyed (LEASE-7).
	CleanupConfirmed bool
	// LeaseID is the probe lease's id.
	LeaseID string
	// At is when the probe observed this.
	At time.Time
	// Isolation is the level the probe measured inside the sandbox
	// (internal/isolation, by name); "" when it was not measured (a driver
	// that does not report its host's kernel): the record then holds no
	// level.
	Isolation string
}

// isolationLevels are drivers.Isolation's names in its order (this floor
// imports no driver code; internal/isolation's test checks they agree).
var isolationLevels = []string{"none", "container", "gvisor", "microvm"}

// IsolationRank returns the place of the level named l in drivers.Isolation's
// order (none 0, container 1, gvisor 2, microvm 3); "" is none, and a name
// that is no level -1.
func IsolationRank(l string) int {
	if l == "" {
		return 0
	}
	return slices.Index(isolationLevels, l)
}

// meets reports whether the measured level meets the declared one.
func meets(measured, declared string) bool {
	m, d := IsolationRank(measured), IsolationRank(declared)
	return m >= 0 && d >= 0 && m >= d
}

// Evaluate decides whether the probe's evidence qualifies the subject
// (QUAL-1). It returns a Record and a CodeRecorded diagnostic when the
// environment is saved, its image is pinned, the live sandbox reported that
// same identity, the platform was measured, the isolation measured (when
// measured) meets the level the subject declares, and cleanup was
// confirmed; the record keeps the measured level.
// Otherwise it returns the zero Record and a diagnostic naming the first
// condition that failed, in that order. It is pure.
func Evaluate(s Subject, ev Evidence) (qualification.Record, qualification.Diagnostic) {
	fail := func(c string, format string, args ...any) (qualification.Record, qualification.Diagnostic) {
		return qualification.Record{}, qualification.Diagnostic{Code: c, Message: fmt.Sprintf(format, args...)}
	}
	if !s.Saved || s.Environment == "" {
		return fail(NotSaved, "the environment is not saved: a draft probe never records a qualification")
	}
	if s.Company == "" {
		return fail(NoCompany, "no company: a qualification is recorded for one company")
	}
	if s.Fingerprint == "" {
		return fail(NoFingerprint, "no config fingerprint for environment %s", s.Environment)
	}
	want, ok := s.Image.Identity()
	if !ok {
		return fail(ImageNotPinned, "%s", notPinnedMessage(s.Image))
	}
	if ev.LiveImage.IsZero() {
		return fail(IdentityNotReported, "the live sandbox did not report its image identity; expected %s", want)
	}
	if ev.LiveImage != want {
		return fail(IdentityMismatch, "the live sandbox runs %s, but the environment is configured with %s", ev.LiveImage, want)
	}
	p := ev.Platform.Normalize()
	if p.OS == "" || p.Arch == "" {
		return fail(PlatformNotMeasured, "the platform (os, arch, libc) was not measured")
	}
	if err := p.Validate(); err != nil {
		return fail(PlatformNotMeasured, "the platform measurement is not usable: %v", err)
	}
	if ev.Isolation != "" && !meets(ev.Isolation, s.Isolation) {
		return fail(IsolationMismatch, "the target declares isolation %s, but the probe measured %s inside the sandbox", s.Isolation, cmp.Or(ev.Isolation, "nothing"))
	}
	if !ev.CleanupConfirmed {
		return fail(CleanupNotConfirmed, "the probe lease's cleanup was not confirmed by the provider; the lease is pending cleanup")
	}
	if ev.LeaseID == "" || ev.At.IsZero() {
		return fail(IncompleteEvidence, "the evidence lacks the probe lease id or the probe time")
	}
	rec := qualification.Record{
		Company:     s.Company,
		Environment: s.Environment,
		Fingerprint: s.Fingerprint,
		Image:       want,
		Template:    s.Template,
		Platform:    p,
		Isolation:   ev.Isolation,
		LeaseID:     ev.LeaseID,
		RecordedAt:  ev.At,
	}
	return rec, qualification.Diagnostic{Code: Recorded, Message: fmt.Sprintf("qualified %s on %s", want, p)}
}

func notPinnedMessage(r images.Reference) string {
	switch {
	case r.IsZero():
		return "no image is configured: a provider default image never qualifies; configure repo@sha256:<digest> or a provider snapshot id"
	case r.Kind() == images.RefTag:
		return fmt.Sprintf("image %q is a mutable tag: pin it by digest (repo@sha256:...) to qualify", r.String())
	case r.Kind() == images.RefSnapshotName:
		return fmt.Sprintf("snapshot %q is known only by its name: reference it by its provider id to qualify", r.SnapshotName())
	default:
		return fmt.Sprintf("image %q is not pinned", r.String())
	}
}

// Valid reports whether rec qualifies the current subject (QUAL-3, QUAL-4):
// only for the same company and environment, while the environment is
// saved, while the current fingerprint equals the recorded one, and while
// the recorded isolation (when recorded) meets the level the subject
// declares now. A stale
// record is never reused. The diagnostic is CodeQualified when valid, else
// says why not.
func Valid(rec qualification.Record, cur Subject) (bool, qualification.Diagnostic) {
	no := func(c string, format string, args ...any) (bool, qualification.Diagnostic) {
		return false, qualification.Diagnostic{Code: c, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case rec == qualification.Record{}:
		return no(NoRecord, "no qualification is recorded; probe the saved environment with a pinned image")
	case rec.Company != cur.Company:
		return no(OtherCompany, "the qualification was recorded for another company")
	case rec.Environment != cur.Environment:
		return no(OtherEnvironment, "the qualification was recorded for another environment")
	case !cur.Saved:
		return no(NotSaved, "the environment is not saved")
	case rec.Fingerprint != cur.Fingerprint:
		return no(Stale, "the target, account, image or template changed since the qualification; probe again")
	case rec.Template != cur.Template:
		return no(Stale, "the active template changed since the qualification; probe again")
	}
	want, ok := cur.Image.Identity()
	if !ok {
		return no(ImageNotPinned, "%s", notPinnedMessage(cur.Image))
	}
	if want != rec.Image {
		return no(Stale, "the image changed since the qualification; probe again")
	}
	if rec.Isolation != "" && !meets(rec.Isolation, cur.Isolation) {
		return no(Stale, "the target now declares isolation %s, but the qualification measured %s; probe again", cur.Isolation, rec.Isolation)
	}
	if !rec.InvalidatedAt.IsZero() {
		return no(Invalidated, "invalidated at %s: %s", rec.InvalidatedAt.UTC().Format(time.RFC3339), rec.InvalidReason)
	}
	return true, qualification.Diagnostic{Code: Qualified, Message: fmt.Sprintf("qualified on %s at %s", rec.Platform, rec.RecordedAt.UTC().Format(time.RFC3339))}
}

// NewView returns the view of rec (the zero Record when none is stored)
// for the current subject. A stale or foreign record shows as not
// qualified with the reason, never with its platform.
func NewView(rec qualification.Record, cur Subject) qualification.View {
	ok, d := Valid(rec, cur)
	v := qualification.View{Qualified: ok, Code: d.Code, Reason: d.Message}
	if ok {
		p, at := rec.Platform, rec.RecordedAt.UTC()
		v.Platform, v.RecordedAt, v.Isolation = &p, &at, rec.Isolation
	}
	if d.Code == Invalidated {
		at := rec.InvalidatedAt.UTC()
		v.InvalidatedAt = &at
	}
	return v
}
