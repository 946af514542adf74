package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

type refFacts struct {
	Kind       string
	String     string
	Pinned     bool
	Repository string
	Registry   string
	Tag        string
	Digest     string
	Provider   string
	SnapshotID string
	SnapName   string
	Identity   string
}

func factsOf(r Reference) refFacts {
	id, ok := r.Identity()
	f := refFacts{
		Kind: cmpOr(string(r.Kind()), "none"), String: r.String(), Pinned: pinned(r),
		Repository: r.Repository(), Registry: registry(r), Tag: r.Tag(), Digest: r.digest,
		Provider: r.Provider(), SnapshotID: snapshotID(r), SnapName: r.SnapshotName(),
	}
	if ok {
		f.Identity = id.String()
	}
	return f
}

// IMG-1: parse and normalize; pinned (digest, snapshot id) vs mutable.
func TestParseReferenceGood(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want refFacts
	}{
		{"bare name is docker hub library with implicit latest, mutable", "alpine", refFacts{
			Kind: "tag", String: "index.docker.io/library/alpine:latest", Repository: "index.docker.io/library/alpine",
			Registry: "index.docker.io", Tag: "latest"}},
		{"docker.io is normalized to index.docker.io", "docker.io/library/alpine:3.19", refFacts{
			Kind: "tag", String: "index.docker.io/library/alpine:3.19", Repository: "index.docker.io/library/alpine",
			Registry: "index.docker.io", Tag: "3.19"}},
		{"loopback registry with port keeps its host", "127.0.0.1:5000/team/app:v1", refFacts{
			Kind: "tag", String: "127.0.0.1:5000/team/app:v1", Repository: "127.0.0.1:5000/team/app",
			Registry: "127.0.0.1:5000", Tag: "v1"}},
		{"digest reference is pinned and has an identity", "ghcr.io/org/app@sha256:" + hexA, refFacts{
			Kind: "digest", String: "ghcr.io/org/app@sha256:" + hexA, Pinned: true, Repository: "ghcr.io/org/app",
			Registry: "ghcr.io", Digest: "sha256:" + hexA, Identity: "ghcr.io/org/app@sha256:" + hexA}},
		{"tag plus digest: the digest pins and the tag is dropped", "alpine:3.19@sha256:" + hexA, refFacts{
			Kind: "digest", String: "index.docker.io/library/alpine@sha256:" + hexA, Pinned: true,
			Repository: "index.docker.io/library/alpine", Registry: "index.docker.io", Digest: "sha256:" + hexA,
			Identity: "index.docker.io/library/alpine@sha256:" + hexA}},
		{"snapshot by provider id is pinned", "snapshot:daytona/0b5f3c1e-9a7d-4c1e-8f00-1234567890ab", refFacts{
			Kind: "snapshot-id", String: "snapshot:daytona/0b5f3c1e-9a7d-4c1e-8f00-1234567890ab", Pinned: true,
			Provider: "daytona", SnapshotID: "0b5f3c1e-9a7d-4c1e-8f00-1234567890ab",
			Identity: "snapshot:daytona/0b5f3c1e-9a7d-4c1e-8f00-1234567890ab"}},
		{"snapshot known only by name is mutable", "snapshot-name:daytona/daytonaio/sandbox:0.4.3", refFacts{
			Kind: "snapshot-name", String: "snapshot-name:daytona/daytonaio/sandbox:0.4.3",
			Provider: "daytona", SnapName: "daytonaio/sandbox:0.4.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseReference(tt.in)
			if err != nil {
				t.Fatalf("ParseReference(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, factsOf(r)); diff != "" {
				t.Errorf("ParseReference(%q) (-want +got):\n%s", tt.in, diff)
			}
			again, err := ParseReference(r.String())
			if err != nil || again != r {
				t.Errorf("round trip of %q: got %v, %v; want %v", r.String(), again, err, r)
			}
		})
	}
}

// IMG-1: malformed references are rejected with an error quoting the input.
func TestParseReferenceBad(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in string }{
		{"empty is not a reference (provider default is the zero value)", ""},
		{"upper-case repository", "Alpine:latest"},
		{"space inside", "alpine latest"},
		{"surrounding whitespace", " alpine"},
		{"bad tag characters", "alpine:bad tag"},
		{"short digest", "alpine@sha256:abc"},
		{"upper-case digest hex", "alpine@sha256:" + strings.ToUpper(hexA)},
		{"non-sha256 digest", "alpine@sha512:" + hexA + hexA},
		{"snapshot without provider", "snapshot:abc"},
		{"snapshot with empty id", "snapshot:daytona/"},
		{"snapshot with bad provider", "snapshot:Day Tona/x"},
		{"snapshot name without name", "snapshot-name:daytona/"},
		{"snapshot name with space", "snapshot-name:daytona/my snap"},
		{"trailing colon", "alpine:"},
		{"double slash", "ghcr.io//app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseReference(tt.in)
			if err == nil {
				t.Fatalf("ParseReference(%q) = nil error, want error", tt.in)
			}
			if !errors.Is(err, errInvalidReference) {
				t.Errorf("error %v does not wrap errInvalidReference", err)
			}
			if q := strings.TrimPrefix(strings.TrimSuffix(jsonQuote(tt.in), `"`), `"`); !strings.Contains(err.Error(), `"`+q+`"`) {
				t.Errorf("error %q does not quote the input %q", err, tt.in)
			}
		})
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestReferenceIdentityRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"127.0.0.1:5000/app@sha256:" + hexA, "snapshot:daytona/snap-1"} {
		r := MustParseReference(s)
		id, ok := r.Identity()
		if !ok {
			t.Fatalf("%q: no identity", s)
		}
		if got := id.Reference(); got != r {
			t.Errorf("Identity(%q).Reference() = %v, want %v", s, got, r)
		}
	}
	if _, ok := MustParseReference("alpine").Identity(); ok {
		t.Error("a tag reference has an identity")
	}
	if got := (Identity{}).Reference(); !got.IsZero() {
		t.Errorf("zero Identity gives reference %v", got)
	}
}

func TestReferenceText(t *testing.T) {
	t.Parallel()
	type doc struct {
		Image Reference `json:"image"`
	}
	in := doc{Image: MustParseReference("alpine@sha256:" + hexA)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"image":"index.docker.io/library/alpine@sha256:` + hexA + `"}`; string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("unmarshal = %v, %v; want %v", out, err, in)
	}
	var zero doc
	if err := json.Unmarshal([]byte(`{"image":""}`), &zero); err != nil || !zero.Image.IsZero() {
		t.Errorf("empty image: %v, %v", zero, err)
	}
	if err := json.Unmarshal([]byte(`{"image":"Bad Ref"}`), &zero); !errors.Is(err, errInvalidReference) {
		t.Errorf("bad image error = %v", err)
	}
}

func TestRefKindString(t *testing.T) {
	t.Parallel()
	got := []string{string(Reference{}.Kind()), fmt.Sprint(RefTag), fmt.Sprint(RefDigest), fmt.Sprint(RefSnapshotID), fmt.Sprint(RefSnapshotName)}
	want := []string{"", "tag", "digest", "snapshot-id", "snapshot-name"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}

func TestSnapshotNameReference(t *testing.T) {
	t.Parallel()
	r, err := ParseReference("snapshot-name:daytona/org/img:1.2")
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind() != RefSnapshotName || pinned(r) || r.SnapshotName() != "org/img:1.2" || r.Provider() != "daytona" {
		t.Errorf("snapshot-name reference = %+v", factsOf(r))
	}
	if _, err := ParseReference("snapshot-name:daytona/"); !errors.Is(err, errInvalidReference) {
		t.Errorf("empty snapshot name: %v", err)
	}
}

// A short name within the limits that exceeds them once normalized
// (registry and library/ added) is refused, quoting the input, rather than
// stored in a form that no longer parses (found by FuzzParseReference).
func TestReferenceTooLongOnceNormalized(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("0", 253)
	_, err := ParseReference(s)
	if !errors.Is(err, errInvalidReference) || !strings.Contains(err.Error(), "normalized form") {
		t.Errorf("ParseReference(253 zeros) = %v; want errInvalidReference about the normalized form", err)
	}
	if _, err := ParseReference(strings.Repeat("0", 200)); err != nil {
		t.Errorf("a 200-character short name: %v", err)
	}
}

// registry returns the registry host of an OCI reference, or "".
func registry(r Reference) string {
	reg, _, _ := strings.Cut(r.Repository(), "/")
	return reg
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// pinned reports whether r names one immutable image.
func pinned(r Reference) bool { _, ok := r.Identity(); return ok }

// snapshotID returns the id of a snapshot-id reference, or "".
func snapshotID(r Reference) string {
	if r.kind != RefSnapshotID {
		return ""
	}
	return r.snapshot
}
