package images

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/berthdev/berth/errcode"
)

// RefKind says what a Reference names; it prints as itself. The zero
// Reference (IsZero: no image configured, a provider default, which is
// mutable) has the empty RefKind.
type RefKind string

const (
	// RefTag is an OCI reference by tag (repo:tag, or a bare repo, which
	// means repo:latest). It is mutable.
	RefTag RefKind = "tag"
	// RefDigest is an OCI reference pinned by manifest digest
	// (repo@sha256:<hex>). It is immutable.
	RefDigest RefKind = "digest"
	// RefSnapshotID is a provider snapshot referenced by the id the provider
	// assigned ("snapshot:<provider>/<id>"). It is immutable.
	RefSnapshotID RefKind = "snapshot-id"
	// RefSnapshotName is a provider snapshot known only by its name
	// ("snapshot-name:<provider>/<name>"). It is mutable: the provider may
	// resolve the name to another snapshot at any time.
	RefSnapshotName RefKind = "snapshot-name"
)

// errInvalidReference is wrapped, with the input quoted, by the errors of
// ParseReference: errcode.Code says errcode.Invalid.
var errInvalidReference = errcode.New(errcode.Invalid, "images: invalid reference")

// Reference is a parsed, normalized image reference: an OCI reference by tag
// or digest, or a provider snapshot by id or by name. It is a comparable
// value type; the zero Reference names no image (a provider default).
//
// Text forms (String writes the normalized one, ParseReference reads all):
//
//	alpine                          -> index.docker.io/library/alpine:latest (tag)
//	127.0.0.1:5000/app:v1           -> 127.0.0.1:5000/app:v1 (tag)
//	repo@sha256:<64 hex>            -> <normalized repo>@sha256:<hex> (digest)
//	repo:tag@sha256:<64 hex>        -> the tag is dropped: the digest pins
//	snapshot:<provider>/<id>        -> provider snapshot by id (pinned)
//	snapshot-name:<provider>/<name> -> provider snapshot by name (mutable)
type Reference struct {
	kind     RefKind
	repo     string // normalized repository, OCI references only
	tag      string // tag references only
	digest   string // "sha256:<hex>", digest references only
	provider string // snapshot references only
	snapshot string // snapshot id or name
}

const (
	snapshotIDPrefix   = "snapshot:"
	snapshotNamePrefix = "snapshot-name:"
)

// snapshotNameRE accepts printable names without whitespace; provider
// snapshot names may look like OCI references ("org/image:1.2").
var snapshotNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}$`)

// repoPathRE is the OCI distribution grammar for a repository path:
// components of lowercase alphanumerics joined by separators, split by "/".
// go-containerregistry's weak validation accepts more ("a//b").
var repoPathRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

// ParseReference parses and normalizes an image reference (IMG-1). Errors
// quote s and have the code errcode.Invalid. The empty string is an error: a
// provider default is the zero Reference, never parsed text.
//
// The references parsed last are kept (up to 256), so that a driver
// parsing its config's image on every acquisition pays the parse once.
func ParseReference(s string) (Reference, error) {
	parsed.mu.Lock()
	r, ok := parsed.m[s]
	parsed.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err := parseReference(s)
	if err == nil {
		parsed.mu.Lock()
		if len(parsed.m) >= maxParsed {
			clear(parsed.m)
		}
		parsed.m[s] = r
		parsed.mu.Unlock()
	}
	return r, err
}

// parsed keeps the last successful parses of ParseReference; Reference is
// a value of strings, so a kept one is never shared mutable state.
var parsed = struct {
	mu sync.Mutex
	m  map[string]Reference
}{m: map[string]Reference{}}

const maxParsed = 256

func parseReference(s string) (Reference, error) {
	if s == "" {
		return Reference{}, fmt.Errorf("%w %q: empty", errInvalidReference, s)
	}
	if rest, ok := strings.CutPrefix(s, snapshotNamePrefix); ok {
		provider, snap, ok := strings.Cut(rest, "/")
		if !ok || !providerRE.MatchString(provider) || !snapshotNameRE.MatchString(snap) {
			return Reference{}, fmt.Errorf("%w %q: want snapshot-name:<provider>/<name>", errInvalidReference, s)
		}
		return Reference{kind: RefSnapshotName, provider: provider, snapshot: snap}, nil
	}
	if strings.HasPrefix(s, snapshotIDPrefix) {
		id, err := ParseIdentity(s)
		if err != nil {
			return Reference{}, fmt.Errorf("%w %q: want snapshot:<provider>/<id>: %w", errInvalidReference, s, err)
		}
		return id.Reference(), nil
	}
	if strings.TrimSpace(s) != s {
		return Reference{}, fmt.Errorf("%w %q: surrounding whitespace", errInvalidReference, s)
	}
	r, err := name.ParseReference(s)
	if err != nil {
		return Reference{}, fmt.Errorf("%w %q: %v", errInvalidReference, s, err)
	}
	if path := r.Context().RepositoryStr(); !repoPathRE.MatchString(path) {
		return Reference{}, fmt.Errorf("%w %q: repository path %q is not lowercase components separated by /", errInvalidReference, s, path)
	}
	var out Reference
	switch r := r.(type) {
	case name.Digest:
		d := r.DigestStr()
		if !digestRE.MatchString(d) {
			return Reference{}, fmt.Errorf("%w %q: digest must be sha256:<64 lowercase hex>", errInvalidReference, s)
		}
		out = Reference{kind: RefDigest, repo: r.Context().Name(), digest: d}
	case name.Tag:
		out = Reference{kind: RefTag, repo: r.Context().Name(), tag: r.TagStr()}
	default:
		return Reference{}, fmt.Errorf("%w %q: unknown reference type %T", errInvalidReference, s, r)
	}
	// Normalizing adds the registry and "library/" to a short name: a name
	// within the length limits may exceed them once normalized, and a
	// reference must stay parseable in the form berth stores and shows.
	if _, err := name.ParseReference(out.String()); err != nil {
		return Reference{}, fmt.Errorf("%w %q: its normalized form is not a valid reference: %v", errInvalidReference, s, err)
	}
	return out, nil
}

// MustParseReference is ParseReference that panics on error; for tests and
// constants.
func MustParseReference(s string) Reference {
	r, err := ParseReference(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Kind reports what the reference names; "" for the zero Reference.
func (r Reference) Kind() RefKind { return r.kind }

// IsZero reports whether r names no image (a provider default).
func (r Reference) IsZero() bool { return r.kind == "" }

// Repository returns the normalized repository of an OCI reference
// (RefTag, RefDigest): "alpine" gives "index.docker.io/library/alpine",
// whose registry host is what comes before the first "/". It is "" for a
// snapshot reference and the zero Reference, which no registry serves.
func (r Reference) Repository() string { return r.repo }

// Tag returns the tag of a tag reference ("latest" when it was implicit),
// or "".
func (r Reference) Tag() string { return r.tag }

// Provider returns the provider of a snapshot reference, or "".
func (r Reference) Provider() string { return r.provider }

// SnapshotName returns the name of a snapshot-name reference, or "".
func (r Reference) SnapshotName() string {
	if r.kind != RefSnapshotName {
		return ""
	}
	return r.snapshot
}

// Identity returns the immutable identity r pins, and true, for a digest or
// snapshot-id reference; the zero Identity and false for a mutable one.
func (r Reference) Identity() (Identity, bool) {
	switch r.kind {
	case RefDigest:
		return Identity{kind: kindDigest, repo: r.repo, digest: r.digest}, true
	case RefSnapshotID:
		return Identity{kind: kindSnapshot, provider: r.provider, id: r.snapshot}, true
	default:
		return Identity{}, false
	}
}

// String returns the normalized text form; "" for the zero Reference.
// ParseReference(r.String()) returns r.
func (r Reference) String() string {
	switch r.kind {
	case RefTag:
		return r.repo + ":" + r.tag
	case RefDigest:
		return r.repo + "@" + r.digest
	case RefSnapshotID:
		return snapshotIDPrefix + r.provider + "/" + r.snapshot
	case RefSnapshotName:
		return snapshotNamePrefix + r.provider + "/" + r.snapshot
	default:
		return ""
	}
}

// MarshalText implements encoding.TextMarshaler; the zero Reference is "".
func (r Reference) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; "" is the zero
// Reference.
func (r *Reference) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = Reference{}
		return nil
	}
	v, err := ParseReference(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
