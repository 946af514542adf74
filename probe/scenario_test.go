package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
)

// The scenario tests follow the verification recipe of issue 4, one test
// per line, on the fake driver.

// A pinned image probed on a saved environment records a qualification
// bound to company, config and image (PRB-3, QUAL-1, QUAL-2).
func TestPinnedImageRecordsQualification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{progress: true})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "pinned", img.String())

	res := w.probe(t, env.ID, "acme")
	if !res.OK || res.Code != reason.OK {
		t.Fatalf("probe failed: %s", res.Summary)
	}
	if !res.PlatformQualificationRecorded || diagCode(res) != qualify.Recorded {
		t.Fatalf("not recorded: %+v", res.QualificationDiagnostic)
	}
	want := []string{stageResolve, stageAcquire, stageDetect, stageIsolation, stageImage, stageRelease, stageQualify}
	if diff := cmp.Diff(want, stageNames(res)); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	for _, s := range res.Stages {
		if !s.OK || s.Error != "" {
			t.Errorf("stage %+v", s)
		}
	}
	if res.ImageIdentity != img {
		t.Errorf("image identity %s, want %s", res.ImageIdentity, img)
	}
	if got := res.Platform.String(); got != "linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12" {
		t.Errorf("platform %q", got)
	}
	if c := res.Cleanup; c == nil || !c.Confirmed || c.PendingCleanup || c.LeaseStatus != lease.StatusReleased {
		t.Errorf("cleanup %+v", c)
	}
	if !strings.Contains(res.Summary, env.ID) || !strings.Contains(res.Summary, "pinned") || !strings.Contains(res.Summary, "provider fake") {
		t.Errorf("summary does not name the target: %q", res.Summary)
	}

	rec, err := w.quals.GetQualification(ctx, "acme", env.ID)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := w.prober.currentSubject(ctx, env.ID, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Company != "acme" || rec.Environment != env.ID || rec.Image != img || rec.Fingerprint != subj.Fingerprint || rec.LeaseID != res.LeaseID {
		t.Errorf("record %+v; subject %+v", rec, subj)
	}
	if ok, d := qualify.Valid(rec, subj); !ok {
		t.Errorf("fresh record not valid: %s", d)
	}
	v, err := w.prober.Qualification(ctx, board, env.ID, "acme")
	if err != nil || !v.Qualified || v.Platform == nil {
		t.Errorf("view %+v, %v", v, err)
	}

	// The lease was fresh and ephemeral, and ended released.
	l, err := w.lstore.GetLease(ctx, res.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Policy != lease.Ephemeral || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" || l.Company != "acme" {
		t.Errorf("lease %+v", l)
	}
	// Progress: a start and an end event per stage, in order.
	close(w.stages)
	var events []string
	for s := range w.stages {
		events = append(events, string(s.Name)+map[bool]string{true: "...", false: " done"}[s.running])
	}
	if len(events) != 2*len(want) || events[0] != "resolve..." || events[len(events)-1] != "qualify done" {
		t.Errorf("progress events %q", events)
	}
	// JSON uses the camelCase names of PRB-6.
	b, _ := json.Marshal(res)
	for _, k := range []string{`"platformQualificationRecorded":true`, `"imageIdentity":"registry.fake.test/team/app@sha256:`, `"qualificationDiagnostic":{"code":"recorded"`, `"cleanup":{"confirmed":true`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
}

// Changing the image, the target or the account makes the old record
// stale, and the next probe records afresh; a rename keeps it (QUAL-3).
// The active-template case is not covered: custom-image templates
// (package templates) do not exist yet, and the probe passes no template.
func TestChangesInvalidateQualification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		change    func(w *world, id string)
		stillGood bool
	}{
		{"image changed", func(w *world, id string) {
			img2 := w.fake.AddImage("registry.fake.test/team/app:v2")
			w.update(t, id, map[string]any{"image": img2.String()}, "")
		}, false},
		{"target (region) changed", func(w *world, id string) {
			w.update(t, id, map[string]any{"region": "eu-2"}, "")
		}, false},
		{"account (secret version) changed", func(w *world, id string) {
			w.update(t, id, map[string]any{"api_key": canary + "-rotated"}, "")
		}, false},
		{"renamed", func(w *world, id string) { w.update(t, id, nil, "renamed") }, true},
		{"knob and metadata changed", func(w *world, id string) {
			w.update(t, id, map[string]any{"cpus": 4, "notes": "bigger"}, "")
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newWorld(t, worldOpts{})
			img := w.fake.AddImage("registry.fake.test/team/app:v1")
			env := w.create(t, "target", img.String())
			if res := w.probe(t, env.ID, "acme"); !res.PlatformQualificationRecorded {
				t.Fatalf("first probe did not record: %s", res.Summary)
			}
			old, err := w.quals.GetQualification(ctx, "acme", env.ID)
			if err != nil {
				t.Fatal(err)
			}
			tt.change(w, env.ID)
			subj, err := w.prober.currentSubject(ctx, env.ID, "acme")
			if err != nil {
				t.Fatal(err)
			}
			ok, d := qualify.Valid(old, subj)
			view, err := w.prober.Qualification(ctx, admin, env.ID, "acme")
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.stillGood || view.Qualified != tt.stillGood {
				t.Fatalf("after change: Valid = %v (%s), view %+v; want %v", ok, d, view, tt.stillGood)
			}
			if tt.stillGood {
				return
			}
			if d.Code != qualify.Stale || view.Platform != nil {
				t.Errorf("stale record: %s, view %+v", d, view)
			}
			res := w.probe(t, env.ID, "acme")
			if !res.PlatformQualificationRecorded {
				t.Fatalf("probe after change did not record: %s", res.Summary)
			}
			fresh, err := w.quals.GetQualification(ctx, "acme", env.ID)
			if err != nil {
				t.Fatal(err)
			}
			if fresh.Fingerprint == old.Fingerprint || fresh.LeaseID == old.LeaseID {
				t.Errorf("record not renewed: old %+v, new %+v", old, fresh)
			}
			if ok, d := qualify.Valid(fresh, subj); !ok {
				t.Errorf("fresh record invalid: %s", d)
			}
		})
	}
}

// Mutable tags, provider defaults and snapshots known only by name never
// qualify, although their probe succeeds; the diagnostic says why (QUAL-5).
// A snapshot by its provider id qualifies (QUAL-6).
func TestUnpinnedImagesDoNotQualify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		image    func(w *world) string
		recorded bool
		reason   string
	}{
		{"mutable tag", func(w *world) string {
			w.fake.AddImage("registry.fake.test/team/app:v1")
			return "registry.fake.test/team/app:v1"
		}, false, "mutable tag"},
		{"provider default", func(w *world) string { return "" }, false, "provider default"},
		{"snapshot known only by name", func(w *world) string {
			fakectl.Of(w.fake).AddSnapshot("base")
			return "snapshot-name:base"
		}, false, "known only by its name"},
		{"snapshot by provider id", func(w *world) string {
			return "snapshot:" + fakectl.Of(w.fake).AddSnapshot("base")
		}, true, "qualified snapshot:fake/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newWorld(t, worldOpts{})
			env := w.create(t, "e", tt.image(w))
			res := w.probe(t, env.ID, "acme")
			if !res.OK {
				t.Fatalf("probe failed: %s", res.Summary)
			}
			if res.PlatformQualificationRecorded != tt.recorded {
				t.Fatalf("recorded = %v, want %v: %+v", res.PlatformQualificationRecorded, tt.recorded, res.QualificationDiagnostic)
			}
			want := qualify.ImageNotPinned
			if tt.recorded {
				want = qualify.Recorded
			}
			if d := res.QualificationDiagnostic; d.Code != want || !strings.Contains(d.Message, tt.reason) {
				t.Errorf("diagnostic %s; want code %s and reason %q", d, want, tt.reason)
			}
			if strings.Contains(res.Summary, res.QualificationDiagnostic.Message) {
				t.Errorf("the summary repeats the diagnostic, a field of its own: %q", res.Summary)
			}
			_, err := w.quals.GetQualification(ctx, "acme", env.ID)
			if tt.recorded != (err == nil) {
				t.Errorf("store: %v", err)
			}
		})
	}
}

// A snapshot id that was deleted fails with image_not_found, and no
// sandbox is created from another snapshot with the same name (QUAL-6).
func TestDeletedSnapshotFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	old := fakectl.Of(w.fake).AddSnapshot("base")
	env := w.create(t, "snap", "snapshot:"+old)
	fakectl.Of(w.fake).DeleteSnapshot(old)
	replacement := fakectl.Of(w.fake).AddSnapshot("base")
	if replacement == old {
		t.Fatal("the replacement has the deleted id")
	}

	res := w.probe(t, env.ID, "acme")
	if res.OK || res.Code != reason.ImageNotFound {
		t.Fatalf("probe of a deleted snapshot: ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
	}
	if st, _ := stageOf(res, stageAcquire); st.OK || st.Code != reason.ImageNotFound {
		t.Errorf("acquire stage %+v", st)
	}
	if n := len(fakectl.Of(w.fake).Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes were created: %+v", n, fakectl.Of(w.fake).Sandboxes())
	}
	if n := fakectl.Of(w.fake).Calls("start") + fakectl.Of(w.fake).Calls("exec"); n != 0 {
		t.Errorf("%d start/exec calls; want none", n)
	}
	if res.PlatformQualificationRecorded || res.Hostname != "" || !res.Platform.IsZero() {
		t.Errorf("a failed acquire measured something: %+v", res)
	}
	if _, err := w.quals.GetQualification(ctx, "acme", env.ID); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("a record exists: %v", err)
	}
}

// The live sandbox reporting another image than configured: the probe
// succeeds, the qualification is not recorded (QUAL-1, IMG-3).
func TestWrongLiveImageNotRecorded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	fakectl.Of(w.fake).ReportWrongImage(w.nextSandbox())

	res := w.probe(t, env.ID, "acme")
	if !res.OK {
		t.Fatalf("probe failed: %s", res.Summary)
	}
	if res.ImageIdentity == img || res.ImageIdentity.IsZero() {
		t.Fatalf("live image %s", res.ImageIdentity)
	}
	if res.PlatformQualificationRecorded || diagCode(res) != qualify.IdentityMismatch {
		t.Errorf("diagnostic %+v", res.QualificationDiagnostic)
	}
}

// Cleanup not confirmed: not recorded, the lease is left pending cleanup,
// and the result reports it with code cleanup_failed (PRB-3, LEASE-7).
func TestUnconfirmedCleanupNotRecorded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		inject func(d *fake.Driver, id string)
	}{
		{"stop accepted but not confirmed", func(d *fake.Driver, id string) { fakectl.Of(d).FakeStop(id, "unconfirmed") }},
		{"confirmation for another sandbox", func(d *fake.Driver, id string) { fakectl.Of(d).FakeStop(id, "foreign_id") }},
		{"stop refused", func(d *fake.Driver, id string) { fakectl.Of(d).RefuseStop(id, drivers.ErrUnreachable) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newWorld(t, worldOpts{})
			img := w.fake.AddImage("registry.fake.test/team/app:v1")
			env := w.create(t, "e", img.String())
			tt.inject(w.fake, w.nextSandbox())

			res := w.probe(t, env.ID, "acme")
			if res.OK || res.Code != reason.CleanupFailed {
				t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
			}
			c := res.Cleanup
			if c == nil || c.Confirmed || !c.PendingCleanup || c.LeaseStatus != lease.StatusPendingCleanup {
				t.Fatalf("cleanup %+v", c)
			}
			if res.PlatformQualificationRecorded || diagCode(res) != qualify.CleanupNotConfirmed {
				t.Errorf("diagnostic %+v", res.QualificationDiagnostic)
			}
			l, err := w.lstore.GetLease(ctx, res.LeaseID)
			if err != nil || l.Status != lease.StatusPendingCleanup {
				t.Errorf("lease %+v, %v", l, err)
			}
			if !strings.Contains(res.Summary, "pending cleanup") || !strings.Contains(res.Summary, res.LeaseID) {
				t.Errorf("summary does not report the pending cleanup: %q", res.Summary)
			}
			if _, err := w.quals.GetQualification(ctx, "acme", env.ID); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("a record exists: %v", err)
			}
		})
	}
}

// Agents (even with a company grant) and non-admin board members are
// denied probes, before anything is read or allocated; admins and local
// operators are not (PRB-7, CFG-2).
func TestProbeAuthorization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	for _, pr := range []authz.Principal{agent, board, {ID: "nobody"}} {
		for _, id := range []string{env.ID, "env_missing"} {
			res, err := w.prober.Probe(ctx, pr, id, Request{Company: "acme"})
			if !errors.Is(err, errcode.ErrDenied) || res != nil {
				t.Errorf("%s probing %s: %v, %v; want denied", pr, id, res, err)
			}
		}
		res, err := w.prober.ProbeDraft(ctx, pr, "fake", map[string]any{"image": img.String()}, Request{})
		if !errors.Is(err, errcode.ErrDenied) || res != nil {
			t.Errorf("%s draft probe: %v, %v; want denied", pr, res, err)
		}
	}
	if n := fakectl.Of(w.fake).TotalCalls(); n != 0 {
		t.Errorf("denied probes made %d provider calls", n)
	}
	for _, pr := range []authz.Principal{admin, operator} {
		if _, err := w.prober.Probe(ctx, pr, "env_missing", Request{Company: "acme"}); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("%s probing a missing environment: %v; want not found", pr, err)
		}
		res, err := w.prober.Probe(ctx, pr, env.ID, Request{Company: "acme"})
		if err != nil || !res.OK {
			t.Errorf("%s: %v, %+v", pr, err, res)
		}
	}
	if _, err := w.prober.Probe(ctx, admin, env.ID, Request{}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("probe without company: %v", err)
	}
}

// Payloads carrying qualification fields are rejected by the catalog
// (CFG-5): a probe's record can only come from a probe.
func TestQualificationFieldsRejected(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"name":"e","driver":"fake","qualification":{"company":"acme"}}`,
		`{"name":"e","driver":"fake","platformQualification":true}`,
		`{"name":"e","driver":"fake","metadata":{"berth.qualification":"yes"}}`,
	} {
		req, err := environment.DecodeCreateRequest([]byte(body))
		if err == nil {
			w := newWorld(t, worldOpts{})
			_, err = w.cat.Create(context.Background(), admin, req)
		}
		if !errors.Is(err, errcode.ErrInvalid) || !strings.Contains(strings.ToLower(err.Error()), "qualification") {
			t.Errorf("%s: %v; want a rejection naming the field", body, err)
		}
	}
}

// A record for company A does not qualify company B (QUAL-4).
func TestQualificationIsCompanyBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	if res := w.probe(t, env.ID, "acme"); !res.PlatformQualificationRecorded {
		t.Fatalf("not recorded: %s", res.Summary)
	}
	recA, err := w.quals.GetQualification(ctx, "acme", env.ID)
	if err != nil {
		t.Fatal(err)
	}
	subjB, err := w.prober.currentSubject(ctx, env.ID, "globex")
	if err != nil {
		t.Fatal(err)
	}
	if ok, d := qualify.Valid(recA, subjB); ok || d.Code != qualify.OtherCompany {
		t.Errorf("A's record for B: %v %s", ok, d)
	}
	vB, err := w.prober.Qualification(ctx, admin, env.ID, "globex")
	if err != nil || vB.Qualified {
		t.Errorf("B's view %+v, %v", vB, err)
	}
	vA, err := w.prober.Qualification(ctx, admin, env.ID, "acme")
	if err != nil || !vA.Qualified {
		t.Errorf("A's view %+v, %v", vA, err)
	}
}

// Reading qualification or capabilities allocates nothing: the fake counts
// no provider call (CAP-1).
func TestReadsAllocateNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	if _, err := w.prober.Qualification(ctx, board, env.ID, "acme"); err != nil {
		t.Fatal(err)
	}
	if info := w.reg.List()[0]; info.Name != "fake" || !info.Available || !info.Effective.Has(drivers.CapImageIdentity) {
		t.Errorf("describe %+v", info)
	}
	_ = w.reg.List()
	_ = drivers.Effective(w.fake, 0)
	if n := fakectl.Of(w.fake).TotalCalls(); n != 0 || len(fakectl.Of(w.fake).Sandboxes()) != 0 {
		t.Errorf("reads made %d provider calls and %d sandboxes", n, len(fakectl.Of(w.fake).Sandboxes()))
	}
	// After a probe, reading its qualification still calls nothing.
	w.probe(t, env.ID, "acme")
	before := fakectl.Of(w.fake).TotalCalls()
	if v, err := w.prober.Qualification(ctx, admin, env.ID, "acme"); err != nil || !v.Qualified {
		t.Fatalf("view %+v, %v", v, err)
	}
	if n := fakectl.Of(w.fake).TotalCalls() - before; n != 0 {
		t.Errorf("reading the qualification made %d provider calls", n)
	}
}

// Each probe allocates a fresh lease and sandbox; none is reused (PRB-3).
func TestEveryProbeIsFresh(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	a := w.probe(t, env.ID, "acme")
	b := w.probe(t, env.ID, "acme")
	if a.LeaseID == b.LeaseID || fakectl.Of(w.fake).Calls("create") != 2 || fakectl.Of(w.fake).Calls("resume") != 0 {
		t.Errorf("leases %s, %s; creates %d, resumes %d", a.LeaseID, b.LeaseID, fakectl.Of(w.fake).Calls("create"), fakectl.Of(w.fake).Calls("resume"))
	}
	for _, sb := range fakectl.Of(w.fake).Sandboxes() {
		if sb.State != drivers.StateDestroyed {
			t.Errorf("sandbox %s left %s", sb.ID, sb.State)
		}
	}
}

// A Result survives a JSON round trip (a CLI prints it, a client reads it).
func TestResultJSONRoundTrip(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	for _, res := range []*Result{w.probe(t, env.ID, "acme"), failedProbe(t, w)} {
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal: %v\n%s", err, b)
		}
		if diff := cmp.Diff(*res, back, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }), cmpopts.EquateComparable(images.Identity{})); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func failedProbe(t *testing.T, w *world) *Result {
	t.Helper()
	env := w.create(t, "gone", "registry.fake.test/none@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	res := w.probe(t, env.ID, "acme")
	if res.OK {
		t.Fatal("probe of a missing digest succeeded")
	}
	return res
}

// A qualified snapshot that the provider later reports not found
// invalidates the record: reads say invalidated, with the reason and time
// (QUAL-3). A snapshot reported inactive is not gone: the record stands.
func TestGoneIdentityInvalidatesRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		break_  func(w *world, snap string)
		code    string
		viewNow string
	}{
		{"deleted snapshot", func(w *world, snap string) { fakectl.Of(w.fake).DeleteSnapshot(snap) }, reason.ImageNotFound, qualify.Invalidated},
		{"inactive snapshot", func(w *world, _ string) {
			fakectl.Of(w.fake).FailNth("create", 2, fmt.Errorf("snapshot is inactive: %w", drivers.ErrImageInactive))
		}, reason.ImageInactive, qualify.Qualified},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{})
			snap := fakectl.Of(w.fake).AddSnapshot("base")
			env := w.create(t, "snap", "snapshot:"+snap)
			if res := w.probe(t, env.ID, "acme"); !res.PlatformQualificationRecorded {
				t.Fatalf("first probe did not qualify: %s", res.Summary)
			}
			tc.break_(w, snap)
			res := w.probe(t, env.ID, "acme")
			if res.OK || res.Code != tc.code {
				t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
			}
			v, err := w.prober.Qualification(ctx, admin, env.ID, "acme")
			if err != nil {
				t.Fatal(err)
			}
			if v.Code != tc.viewNow {
				t.Fatalf("view after %s: %+v, want %s", tc.name, v, tc.viewNow)
			}
			if tc.viewNow == qualify.Invalidated {
				if v.Qualified || v.InvalidatedAt == nil || !strings.Contains(v.Reason, "not found") || v.Platform != nil {
					t.Errorf("invalidated view %+v", v)
				}
				if !strings.Contains(res.QualificationDiagnostic.Message, "invalidated") {
					t.Errorf("diagnostic %+v does not say the record was invalidated", res.QualificationDiagnostic)
				}
			}
		})
	}
}
