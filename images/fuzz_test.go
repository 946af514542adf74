package images

import (
	"errors"
	"testing"
)

// FuzzParseReference checks that every accepted reference round-trips
// through its normalized String form, and that every rejection wraps
// errInvalidReference (IMG-1).
func FuzzParseReference(f *testing.F) {
	for _, s := range []string{
		"alpine", "alpine:3.19", "docker.io/library/alpine", "127.0.0.1:5000/a/b:v1",
		"ghcr.io/org/app@sha256:" + hexA, "alpine:3@sha256:" + hexA, "localhost/app",
		"snapshot:daytona/abc-123", "snapshot-name:daytona/org/img:1.2", "snapshot:", "",
		"[::1]:5000/app:v2", "UPPER", "a:b:c", "registry.example.com:443/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReference(s)
		if err != nil {
			if !errors.Is(err, errInvalidReference) {
				t.Fatalf("ParseReference(%q) error %v does not wrap errInvalidReference", s, err)
			}
			return
		}
		if r.IsZero() {
			t.Fatalf("ParseReference(%q) returned the zero Reference without error", s)
		}
		again, err := ParseReference(r.String())
		if err != nil {
			t.Fatalf("ParseReference(%q) = %q, which does not parse: %v", s, r.String(), err)
		}
		if again != r {
			t.Fatalf("round trip %q -> %q -> %q", s, r.String(), again.String())
		}
		id, ok := r.Identity()
		if ok != pinned(r) {
			t.Fatalf("%q: Pinned() = %v but Identity ok = %v", s, pinned(r), ok)
		}
		if ok {
			pid, err := ParseIdentity(id.String())
			if err != nil || pid != id || pid.Reference() != r {
				t.Fatalf("%q: identity %q does not round trip: %v", s, id.String(), err)
			}
		}
	})
}

// FuzzParseIdentity checks that every accepted identity round-trips through
// String and that rejections wrap errInvalidIdentity.
func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{
		"", "ghcr.io/org/app@sha256:" + hexA, "alpine@sha256:" + hexA, "snapshot:daytona/abc",
		"snapshot:daytona", "snapshot:Daytona/x", "repo@sha256:xyz", "@sha256:" + hexA,
		"ghcr.io//app@sha256:" + hexA, "a__b@sha256:" + hexA,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseIdentity(s)
		if err != nil {
			if !errors.Is(err, errInvalidIdentity) {
				t.Fatalf("ParseIdentity(%q) error %v does not wrap errInvalidIdentity", s, err)
			}
			return
		}
		again, err := ParseIdentity(id.String())
		if err != nil || again != id {
			t.Fatalf("round trip %q -> %q -> %v, %v", s, id.String(), again, err)
		}
		if (s == "") != id.IsZero() {
			t.Fatalf("ParseIdentity(%q).IsZero() = %v", s, id.IsZero())
		}
		if !id.IsZero() {
			ref, err := ParseReference(id.String())
			if err != nil || ref != id.Reference() || !pinned(ref) {
				t.Fatalf("identity %q is not a pinned reference: %v, %v", id.String(), ref, err)
			}
		}
	})
}
