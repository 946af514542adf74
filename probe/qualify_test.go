package probe

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/qualification"
)

// The image field of each driver's config reads as the reference the
// qualification rules need (QUAL-5, QUAL-6): tags and snapshot names are
// mutable, digests and snapshot ids pinned; a Daytona snapshot_id is a
// provider snapshot id.
func TestImageReference(t *testing.T) {
	t.Parallel()
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	fk := fake.New(nil)
	dt := daytona.New(nil)
	tests := []struct {
		name   string
		d      drivers.Driver
		image  string
		kind   images.RefKind
		wantID string // identity text for pinned references
	}{
		{"fake default", fk, "", "", ""},
		{"fake tag", fk, "registry.fake.test/app:v1", images.RefTag, ""},
		{"fake bare repo", fk, "alpine", images.RefTag, ""},
		{"fake digest", fk, "registry.fake.test/app@" + digest, images.RefDigest, "registry.fake.test/app@" + digest},
		{"fake snapshot id", fk, "snapshot:snap-1", images.RefSnapshotID, "snapshot:fake/snap-1"},
		{"fake snapshot identity text", fk, "snapshot:fake/snap-1", images.RefSnapshotID, "snapshot:fake/snap-1"},
		{"fake snapshot name", fk, "snapshot-name:base", images.RefSnapshotName, ""},
		{"daytona snapshot id", dt, "3fa85f64-5717-4562-b3fc-2c963f66afa6", images.RefSnapshotID, "snapshot:daytona/3fa85f64-5717-4562-b3fc-2c963f66afa6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Config{}
			if tt.image != "" {
				cfg[tt.d.Schema().ImageField] = tt.image
			}
			ref, err := imageReference(tt.d, cfg)
			if err != nil {
				t.Fatalf("imageReference(%q): %v", tt.image, err)
			}
			if ref.Kind() != tt.kind {
				t.Errorf("kind %s, want %s", ref.Kind(), tt.kind)
			}
			id, pinned := ref.Identity()
			if pinned != (tt.wantID != "") || id.String() != tt.wantID {
				t.Errorf("identity %q (pinned %v), want %q", id, pinned, tt.wantID)
			}
		})
	}
}

// An archived environment is not probed: the result says so and nothing
// is allocated.
func TestArchivedEnvironmentNotProbed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	env := w.create(t, "old", "")
	if _, err := w.cat.Archive(ctx, admin, env.ID, env.Revision); err != nil {
		t.Fatal(err)
	}
	res := w.probe(t, env.ID, "acme")
	if res.OK || res.Code != reason.Archived || fakectl.Of(w.fake).TotalCalls() != 0 {
		t.Errorf("ok=%v code=%s calls=%d: %s", res.OK, res.Code, fakectl.Of(w.fake).TotalCalls(), res.Summary)
	}
}

// Every probe of a saved environment is stored as the company's last test,
// read back in the qualification view: the failure with its code and
// sentence, the start of a run of failures kept across failures and
// cleared by a success, another company's never shown (issue 53).
func TestLastTestIsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	env := w.create(t, "kept", "")
	view := func() *qualification.LastTest {
		t.Helper()
		v, err := w.prober.Qualification(ctx, admin, env.ID, "acme")
		if err != nil {
			t.Fatal(err)
		}
		return v.LastTest
	}
	if lt := view(); lt != nil {
		t.Fatalf("before any probe: last test %+v, want none", lt)
	}
	ok := w.probe(t, env.ID, "acme")
	lt := view()
	if !ok.OK || lt == nil || !lt.OK || lt.Message != ok.Message || !lt.At.Equal(ok.StartedAt) || !lt.FailingSince.IsZero() {
		t.Fatalf("after a passing probe (%v, %q): last test %+v", ok.OK, ok.Message, lt)
	}
	if lt.Code != ok.QualificationDiagnostic.Code {
		t.Errorf("passing test's code %q, want the qualification's %q", lt.Code, ok.QualificationDiagnostic.Code)
	}
	a, err := w.cat.Archive(ctx, admin, env.ID, env.Revision)
	if err != nil {
		t.Fatal(err)
	}
	first := w.probe(t, env.ID, "acme")
	second := w.probe(t, env.ID, "acme")
	lt = view()
	if first.OK || lt == nil || lt.OK || lt.Code != reason.Archived || lt.Message != second.Message || lt.Message == "" {
		t.Fatalf("after two failed probes: last test %+v", lt)
	}
	if !lt.At.Equal(second.StartedAt) || !lt.FailingSince.Equal(first.StartedAt) {
		t.Errorf("at %v failing since %v; want at %v (the second) failing since %v (the first)", lt.At, lt.FailingSince, second.StartedAt, first.StartedAt)
	}
	if v, err := w.prober.Qualification(ctx, admin, env.ID, "globex"); err != nil || v.LastTest != nil {
		t.Errorf("another company's view: last test %+v, %v; want none", v.LastTest, err)
	}
	if _, err := w.cat.Restore(ctx, admin, env.ID, a.Revision); err != nil {
		t.Fatal(err)
	}
	w.probe(t, env.ID, "acme")
	if lt := view(); lt == nil || !lt.OK || !lt.FailingSince.IsZero() {
		t.Errorf("after a passing probe again: last test %+v", lt)
	}
}
