package images

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/berthdev/berth/errcode"
)

// identityKind says what an Identity names.
type identityKind int

const (
	// kindNone is the zero Identity: no image is known.
	kindNone identityKind = iota
	// kindDigest is an OCI image pinned by its manifest digest (repo@sha256:...).
	kindDigest
	// kindSnapshot is a provider snapshot named by the id the provider assigned
	// to it (for example a Daytona snapshot UUID).
	kindSnapshot
)

// Identity is the immutable identity of an image: an OCI manifest digest in a
// repository, or a provider snapshot id. It is a comparable value type; the
// zero Identity names nothing (IsZero). Digest is not "" for a digest
// identity, SnapshotID not "" for a snapshot identity: that is its kind.
//
// The text form is "repo@sha256:<hex>" for a digest and
// "snapshot:<provider>/<id>" for a provider snapshot.
type Identity struct {
	kind     identityKind
	repo     string // normalized repository, digest identities only
	digest   string // "sha256:<hex>", digest identities only
	provider string // snapshot identities only
	id       string // provider snapshot id, snapshot identities only
}

var (
	digestRE     = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	snapshotIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	providerRE   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

// errInvalidIdentity is wrapped by the errors of ParseIdentity,
// DigestIdentity and SnapshotIdentity: errcode.Code says errcode.Invalid.
var errInvalidIdentity = errcode.New(errcode.Invalid, "images: invalid identity")

// DigestIdentity returns the identity of the manifest digest in repo. repo is
// normalized the way go-containerregistry normalizes repositories
// ("alpine" becomes "index.docker.io/library/alpine").
func DigestIdentity(repo, digest string) (Identity, error) {
	if !digestRE.MatchString(digest) {
		return Identity{}, fmt.Errorf("%w: digest %q is not sha256:<64 hex>", errInvalidIdentity, digest)
	}
	r, err := name.NewRepository(repo)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: repository %q: %v", errInvalidIdentity, repo, err)
	}
	if !repoPathRE.MatchString(r.RepositoryStr()) {
		return Identity{}, fmt.Errorf("%w: repository %q: path is not lowercase components separated by /", errInvalidIdentity, repo)
	}
	return Identity{kind: kindDigest, repo: r.Name(), digest: digest}, nil
}

// SnapshotIdentity returns the identity of a provider snapshot by the id the
// provider assigned. A snapshot known only by its name has no identity.
func SnapshotIdentity(provider, id string) (Identity, error) {
	if !providerRE.MatchString(provider) {
		return Identity{}, fmt.Errorf("%w: provider %q", errInvalidIdentity, provider)
	}
	if !snapshotIDRE.MatchString(id) {
		return Identity{}, fmt.Errorf("%w: snapshot id %q", errInvalidIdentity, id)
	}
	return Identity{kind: kindSnapshot, provider: provider, id: id}, nil
}

// ParseIdentity parses the text form written by Identity.String. The empty
// string parses to the zero Identity.
func ParseIdentity(s string) (Identity, error) {
	if s == "" {
		return Identity{}, nil
	}
	if rest, ok := strings.CutPrefix(s, "snapshot:"); ok {
		provider, id, ok := strings.Cut(rest, "/")
		if !ok {
			return Identity{}, fmt.Errorf("%w: %q: want snapshot:<provider>/<id>", errInvalidIdentity, s)
		}
		return SnapshotIdentity(provider, id)
	}
	repo, digest, ok := strings.Cut(s, "@")
	if !ok {
		return Identity{}, fmt.Errorf("%w: %q: want repo@sha256:<hex> or snapshot:<provider>/<id>", errInvalidIdentity, s)
	}
	return DigestIdentity(repo, digest)
}

// MustParseIdentity is ParseIdentity that panics on error; for tests and
// constants.
func MustParseIdentity(s string) Identity {
	id, err := ParseIdentity(s)
	if err != nil {
		panic(err)
	}
	return id
}

// IsZero reports whether i names nothing.
func (i Identity) IsZero() bool { return i.kind == kindNone }

// Repository returns the normalized repository of a digest identity, or "".
func (i Identity) Repository() string { return i.repo }

// Digest returns "sha256:<hex>" for a digest identity, or "".
func (i Identity) Digest() string { return i.digest }

// Provider returns the provider of a snapshot identity, or "".
func (i Identity) Provider() string { return i.provider }

// SnapshotID returns the provider-assigned id of a snapshot identity, or "".
func (i Identity) SnapshotID() string { return i.id }

// String returns the text form; "" for the zero Identity.
func (i Identity) String() string {
	switch i.kind {
	case kindDigest:
		return i.repo + "@" + i.digest
	case kindSnapshot:
		return "snapshot:" + i.provider + "/" + i.id
	default:
		return ""
	}
}

// MarshalText implements encoding.TextMarshaler.
func (i Identity) MarshalText() ([]byte, error) { return []byte(i.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (i *Identity) UnmarshalText(b []byte) error {
	v, err := ParseIdentity(string(b))
	if err != nil {
		return err
	}
	*i = v
	return nil
}

// Reference returns the pinned Reference that names i: a digest reference
// for a digest identity, a snapshot-id reference for a snapshot identity,
// and the zero Reference for the zero Identity.
func (i Identity) Reference() Reference {
	switch i.kind {
	case kindDigest:
		return Reference{kind: RefDigest, repo: i.repo, digest: i.digest}
	case kindSnapshot:
		return Reference{kind: RefSnapshotID, provider: i.provider, snapshot: i.id}
	default:
		return Reference{}
	}
}
