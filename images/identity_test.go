package images

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// IMG-3: identities have one normalized text form.
func TestParseIdentityGood(t *testing.T) {
	t.Parallel()
	type facts struct {
		Kind, String, Repository, Digest, Provider, SnapshotID string
	}
	tests := []struct {
		name, in string
		want     facts
	}{
		{"empty is the zero identity", "", facts{Kind: "none"}},
		{"digest in a short docker hub name is normalized", "alpine@sha256:" + hexA, facts{
			Kind: "digest", String: "index.docker.io/library/alpine@sha256:" + hexA, Repository: "index.docker.io/library/alpine", Digest: "sha256:" + hexA}},
		{"digest in a loopback registry", "127.0.0.1:5000/app@sha256:" + hexA, facts{
			Kind: "digest", String: "127.0.0.1:5000/app@sha256:" + hexA, Repository: "127.0.0.1:5000/app", Digest: "sha256:" + hexA}},
		{"provider snapshot id", "snapshot:daytona/1f2e-3d", facts{
			Kind: "snapshot", String: "snapshot:daytona/1f2e-3d", Provider: "daytona", SnapshotID: "1f2e-3d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := ParseIdentity(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got := facts{kindName(id), id.String(), id.Repository(), id.Digest(), id.Provider(), id.SnapshotID()}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseIdentity(%q) (-want +got):\n%s", tt.in, diff)
			}
			if MustParseIdentity(id.String()) != id {
				t.Errorf("round trip of %q failed", id.String())
			}
		})
	}
}

func TestParseIdentityBad(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"alpine", "alpine:latest", "alpine@sha256:abc", "alpine@sha512:" + hexA, "ghcr.io//app@sha256:" + hexA,
		"snapshot:daytona", "snapshot:Daytona/x", "snapshot:daytona/", "snapshot:daytona/has space", "Alpine@sha256:" + hexA,
	} {
		if _, err := ParseIdentity(in); !errors.Is(err, errInvalidIdentity) {
			t.Errorf("ParseIdentity(%q) error = %v, want errInvalidIdentity", in, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustParseIdentity of a bad identity did not panic")
		}
	}()
	MustParseIdentity("alpine")
}

func TestIdentityText(t *testing.T) {
	t.Parallel()
	type doc struct {
		ID Identity `json:"id"`
	}
	in := doc{ID: MustParseIdentity("snapshot:daytona/abc")}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"id":"snapshot:daytona/abc"}` {
		t.Fatalf("json = %s, %v", b, err)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("unmarshal = %v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"nope"}`), &out); !errors.Is(err, errInvalidIdentity) {
		t.Errorf("unmarshal of a bad identity: %v", err)
	}
}

// kindName names what id names: "none", "digest" or "snapshot".
func kindName(id Identity) string {
	switch {
	case id.Digest() != "":
		return "digest"
	case id.SnapshotID() != "":
		return "snapshot"
	}
	return "none"
}
