package qualify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/qualification"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/images"
)

var (
	probeTime = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	pinnedRef = images.MustParseReference("127.0.0.1:5000/app@" + digestA)
	pinnedID  = images.MustParseIdentity("127.0.0.1:5000/app@" + digestA)
	debian    = mustPlatform("linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12")
)

func subject() Subject {
	in := baseInput()
	in.Image = pinnedRef.String()
	return Subject{Company: "acme", Environment: "env-1", Saved: true, Fingerprint: Fingerprint(in), Image: pinnedRef, Template: in.Template}
}

func evidence() Evidence {
	return Evidence{LiveImage: pinnedID, Platform: debian, CleanupConfirmed: true, LeaseID: "lease-1", At: probeTime}
}

// QUAL-1, QUAL-5: a record only when every condition holds; otherwise the
// first failed condition, by stable code.
func TestEvaluate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		subject  func(*Subject)
		evidence func(*Evidence)
		code     string
		mention  string // the message must contain this
	}{
		{"pinned image, same live identity, measured platform and confirmed cleanup records", nil, nil, Recorded, pinnedID.String()},
		{"a draft (unsaved) config never records", func(s *Subject) { s.Saved = false }, nil, NotSaved, "draft"},
		{"an environment without id is not saved", func(s *Subject) { s.Environment = "" }, nil, NotSaved, "not saved"},
		{"no company, no record", func(s *Subject) { s.Company = "" }, nil, NoCompany, "company"},
		{"no fingerprint, no record", func(s *Subject) { s.Fingerprint = "" }, nil, NoFingerprint, "env-1"},
		{"a mutable tag never qualifies even though the probe succeeded", func(s *Subject) {
			s.Image = images.MustParseReference("127.0.0.1:5000/app:v1")
		}, nil, ImageNotPinned, `"127.0.0.1:5000/app:v1" is a mutable tag`},
		{"the implicit latest tag never qualifies", func(s *Subject) { s.Image = images.MustParseReference("alpine") }, nil, ImageNotPinned, "alpine:latest"},
		{"a provider default image never qualifies", func(s *Subject) { s.Image = images.Reference{} }, nil, ImageNotPinned, "provider default"},
		{"a snapshot known only by name never qualifies", func(s *Subject) {
			s.Image = images.MustParseReference("snapshot-name:daytona/my-snap")
		}, nil, ImageNotPinned, `"my-snap" is known only by its name`},
		{"the first failed condition wins: unsaved before unpinned", func(s *Subject) {
			s.Saved, s.Image = false, images.Reference{}
		}, func(e *Evidence) { e.CleanupConfirmed = false }, NotSaved, "not saved"},
		{"a live sandbox that reports no image is not recorded", nil, func(e *Evidence) { e.LiveImage = images.Identity{} }, IdentityNotReported, pinnedID.String()},
		{"a sandbox measured below the declared isolation is not recorded", func(s *Subject) { s.Isolation = "gvisor" },
			func(e *Evidence) { e.Isolation = "container" }, IsolationMismatch, "declares isolation gvisor, but the probe measured container"},
		{"a sandbox measured above the declared isolation records", func(s *Subject) { s.Isolation = "container" },
			func(e *Evidence) { e.Isolation = "gvisor" }, Recorded, pinnedID.String()},
		{"a live sandbox running another image is not recorded", nil, func(e *Evidence) {
			e.LiveImage = images.MustParseIdentity("127.0.0.1:5000/app@" + digestB)
		}, IdentityMismatch, digestB},
		{"the same digest in another repository is another identity", nil, func(e *Evidence) {
			e.LiveImage = images.MustParseIdentity("127.0.0.1:5000/other@" + digestA)
		}, IdentityMismatch, "other"},
		{"a snapshot id qualifies when the live sandbox reports that id", func(s *Subject) {
			s.Image = images.MustParseReference("snapshot:daytona/snap-123")
		}, func(e *Evidence) { e.LiveImage = images.MustParseIdentity("snapshot:daytona/snap-123") }, Recorded, "snap-123"},
		{"a replacement snapshot with another id is a mismatch", func(s *Subject) {
			s.Image = images.MustParseReference("snapshot:daytona/snap-123")
		}, func(e *Evidence) { e.LiveImage = images.MustParseIdentity("snapshot:daytona/snap-456") }, IdentityMismatch, "snap-456"},
		{"an unmeasured platform is not recorded", nil, func(e *Evidence) { e.Platform = qualification.Platform{} }, PlatformNotMeasured, "not measured"},
		{"a platform with only a kernel is not measured", nil, func(e *Evidence) { e.Platform = qualification.Platform{Kernel: "6.1"} }, PlatformNotMeasured, "not measured"},
		{"an invalid platform measurement is not recorded", nil, func(e *Evidence) {
			e.Platform = qualification.Platform{OS: "linux", Arch: "amd64", Kernel: "has space"}
		}, PlatformNotMeasured, "kernel"},
		{"unconfirmed cleanup is not recorded", nil, func(e *Evidence) { e.CleanupConfirmed = false }, CleanupNotConfirmed, "pending cleanup"},
		{"evidence without a lease id is incomplete", nil, func(e *Evidence) { e.LeaseID = "" }, IncompleteEvidence, "lease"},
		{"evidence without a time is incomplete", nil, func(e *Evidence) { e.At = time.Time{} }, IncompleteEvidence, "time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, e := subject(), evidence()
			if tt.subject != nil {
				tt.subject(&s)
			}
			if tt.evidence != nil {
				tt.evidence(&e)
			}
			rec, d := Evaluate(s, e)
			if d.Code != tt.code {
				t.Fatalf("Evaluate code = %s (%s), want %s", d.Code, d.Message, tt.code)
			}
			if !strings.Contains(d.Message, tt.mention) {
				t.Errorf("message %q does not mention %q", d.Message, tt.mention)
			}
			if recorded(d) != (tt.code == Recorded) || (rec == qualification.Record{}) == (tt.code == Recorded) {
				t.Errorf("OK() = %v, record zero = %v for code %s", recorded(d), (rec == qualification.Record{}), d.Code)
			}
		})
	}
}

// QUAL-2: the record holds company, environment, fingerprint, image
// identity, template, normalized platform, probe lease id and time.
func TestEvaluateRecordFields(t *testing.T) {
	t.Parallel()
	s, e := subject(), evidence()
	e.Platform = qualification.Platform{OS: "Linux", Arch: "x86_64", Libc: "glibc", LibcVersion: "2.36"}
	rec, d := Evaluate(s, e)
	if !recorded(d) {
		t.Fatal(d)
	}
	want := qualification.Record{
		Company: "acme", Environment: "env-1", Fingerprint: s.Fingerprint, Image: pinnedID, Template: s.Template,
		Platform: qualification.Platform{OS: "linux", Arch: "amd64", Libc: qualification.LibcGlibc, LibcVersion: "2.36"}, LeaseID: "lease-1", RecordedAt: probeTime,
	}
	if diff := cmp.Diff(want, rec, cmp.Comparer(func(a, b images.Identity) bool { return a == b })); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

// QUAL-3, QUAL-4: a record is valid only for its company and environment
// and while the fingerprint is unchanged.
func TestValid(t *testing.T) {
	t.Parallel()
	rec, d := Evaluate(subject(), evidence())
	if !recorded(d) {
		t.Fatal(d)
	}
	withInput := func(f func(in *FingerprintInput)) func(*Subject) {
		return func(s *Subject) {
			in := baseInput()
			in.Image = s.Image.String()
			f(&in)
			s.Fingerprint = Fingerprint(in)
			if r, err := images.ParseReference(in.Image); err == nil {
				s.Image = r
			}
			s.Template = in.Template
		}
	}
	tests := []struct {
		name   string
		change func(*Subject)
		rec    func(*qualification.Record)
		code   string
	}{
		{"the same subject is qualified", nil, nil, Qualified},
		{"rename keeps the record (names are not fingerprint inputs)", withInput(func(*FingerprintInput) {}), nil, Qualified},
		{"record for company A does not qualify company B", func(s *Subject) { s.Company = "other-co" }, nil, OtherCompany},
		{"record for one environment does not qualify another", func(s *Subject) { s.Environment = "env-2" }, nil, OtherEnvironment},
		{"a deleted environment is not qualified", func(s *Subject) { s.Saved = false }, nil, NotSaved},
		{"stale fingerprint is never reused: target changed", withInput(func(in *FingerprintInput) { in.Target["host"] = "10.9.9.9" }), nil, Stale},
		{"stale fingerprint is never reused: account secret version changed", withInput(func(in *FingerprintInput) {
			in.Secrets = map[string]SecretRef{"privateKey": {ID: "sec-1", Version: 4}}
		}), nil, Stale},
		{"stale fingerprint is never reused: image changed", withInput(func(in *FingerprintInput) { in.Image = "127.0.0.1:5000/app@" + digestB }), nil, Stale},
		{"stale fingerprint is never reused: active template changed", withInput(func(in *FingerprintInput) { in.Template = "snapshot:fake/tpl-2" }), nil, Stale},
		{"a changed template is stale even if the caller forgot it in the fingerprint", func(s *Subject) { s.Template = "snapshot:fake/tpl-9" }, nil, Stale},
		{"an image switched to a tag no longer qualifies", func(s *Subject) { s.Image = images.MustParseReference("127.0.0.1:5000/app:v1") }, nil, ImageNotPinned},
		{"a record whose image differs from the configured one is stale", nil, func(r *qualification.Record) {
			r.Image = images.MustParseIdentity("127.0.0.1:5000/app@" + digestB)
		}, Stale},
		{"no record is not qualified", nil, func(r *qualification.Record) { *r = qualification.Record{} }, NoRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cur, r := subject(), rec
			if tt.change != nil {
				tt.change(&cur)
			}
			if tt.rec != nil {
				tt.rec(&r)
			}
			ok, d := Valid(r, cur)
			if d.Code != tt.code || ok != (tt.code == Qualified) || recorded(d) != ok {
				t.Errorf("Valid = %v, %s (%s); want code %s", ok, d.Code, d.Message, tt.code)
			}
		})
	}
}

// QUAL-7: the public view shows qualified, reason, platform and time, and
// leaves out the lease id, fingerprint and other private metadata.
func TestView(t *testing.T) {
	t.Parallel()
	rec, _ := Evaluate(subject(), evidence())
	rec.LeaseID = "lease-secret-internal-7"

	v := NewView(rec, subject())
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"qualified":true,"code":"qualified","reason":"qualified on linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12 at 2026-11-29T10:00:00Z",` +
		`"platform":"linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12","recordedAt":"2026-11-29T10:00:00Z"}`
	if string(b) != want {
		t.Errorf("view json:\n got %s\nwant %s", b, want)
	}
	for _, private := range []string{rec.LeaseID, rec.Fingerprint, "leaseId", "fingerprint"} {
		if strings.Contains(string(b), private) {
			t.Errorf("view shows private %q: %s", private, b)
		}
	}

	stale := subject()
	stale.Fingerprint = "sha256:changed"
	sv := NewView(rec, stale)
	if sv.Qualified || sv.Code != Stale || sv.Platform != nil || sv.RecordedAt != nil || sv.Reason == "" {
		t.Errorf("view of a stale record = %+v; want not qualified with a reason and no platform", sv)
	}
	other := subject()
	other.Company = "other-co"
	if ov := NewView(rec, other); ov.Qualified || ov.Code != OtherCompany || ov.Platform != nil {
		t.Errorf("view for another company = %+v", ov)
	}
	if nv := NewView(qualification.Record{}, subject()); nv.Qualified || nv.Code != NoRecord {
		t.Errorf("view without a record = %+v", nv)
	}
}

// A record survives a JSON round trip unchanged (stores may keep it as JSON).
func TestRecordJSON(t *testing.T) {
	t.Parallel()
	rec, d := Evaluate(subject(), evidence())
	if !recorded(d) {
		t.Fatal(d)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back qualification.Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, back, cmp.Comparer(func(a, b images.Identity) bool { return a == b })); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s\n%s", diff, b)
	}
	var zero qualification.Record
	b, _ = json.Marshal(zero)
	var zeroBack qualification.Record
	if err := json.Unmarshal(b, &zeroBack); err != nil || zeroBack != (qualification.Record{}) {
		t.Errorf("zero record round trip = %+v, %v (%s)", zeroBack, err, b)
	}
}

// recorded reports whether d says a record was made or applies.
func recorded(d qualification.Diagnostic) bool {
	return d.Code == Recorded || d.Code == Qualified
}

// A record keeps the isolation measured, and applies only while it meets
// the level the subject declares now; a record made before the isolation
// was measured ("") is not judged by it.
//
// Requirements: ISO-2.
func TestValidIsolation(t *testing.T) {
	t.Parallel()
	subj := subject()
	subj.Isolation = "container"
	ev := evidence()
	ev.Isolation = "container"
	rec, d := Evaluate(subj, ev)
	if d.Code != Recorded || rec.Isolation != "container" {
		t.Fatalf("Evaluate: %+v, %s", rec, d)
	}
	if ok, d := Valid(rec, subj); !ok {
		t.Errorf("the same subject: %s", d)
	}
	if v := NewView(rec, subj); v.Isolation != "container" {
		t.Errorf("view isolation %q", v.Isolation)
	}
	subj.Isolation = "gvisor"
	if ok, d := Valid(rec, subj); ok || d.Code != Stale || !strings.Contains(d.Message, "declares isolation gvisor") {
		t.Errorf("a gvisor subject, a container record: %v, %s", ok, d)
	}
	if v := NewView(rec, subj); v.Isolation != "" || v.Qualified {
		t.Errorf("a stale view shows isolation %q", v.Isolation)
	}
	rec.Isolation = ""
	if ok, d := Valid(rec, subj); !ok {
		t.Errorf("a record without a measured isolation: %s", d)
	}
}
