package images_test

import (
	"fmt"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
)

// ParseReference normalizes what an operator types: a short name gains
// its registry and "library/", a bare repository its "latest" tag, and only
// a digest (or a provider snapshot id) is pinned.
func ExampleParseReference() {
	for _, s := range []string{
		"alpine",
		"ghcr.io/acme/agent:1.2",
		"alpine@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"snapshot:daytona/snap-42",
		"snapshot-name:daytona/python-dev",
	} {
		r, err := images.ParseReference(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		_, pinned := r.Identity()
		fmt.Printf("%s (%s, pinned %t)\n", r, r.Kind(), pinned)
	}
	// Output:
	// index.docker.io/library/alpine:latest (tag, pinned false)
	// ghcr.io/acme/agent:1.2 (tag, pinned false)
	// index.docker.io/library/alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef (digest, pinned true)
	// snapshot:daytona/snap-42 (snapshot-id, pinned true)
	// snapshot-name:daytona/python-dev (snapshot-name, pinned false)
}

// A string that is not a reference is refused with an error whose code is
// errcode.Invalid and that quotes the input; nothing is guessed.
func ExampleParseReference_invalid() {
	_, err := images.ParseReference("Alpine:latest")
	fmt.Println(errcode.Code(err) == errcode.Invalid)
	_, err = images.ParseReference(" alpine")
	fmt.Println(err)
	// Output:
	// true
	// images: invalid reference " alpine": surrounding whitespace
}

// An Identity is what a live sandbox runs: a manifest digest in a
// repository (Digest), or a provider snapshot id (Provider, SnapshotID). Its text form round-trips through
// ParseIdentity, and a pinned Reference names one.
func ExampleIdentity() {
	id, err := images.DigestIdentity("alpine", "sha256:"+"ab"+"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd")
	if err != nil {
		fmt.Println(err)
		return
	}
	again, err := images.ParseIdentity(id.String())
	fmt.Println(id, id.Digest() != "", again == id, err)

	ref := images.MustParseReference("snapshot:daytona/snap-42")
	snap, ok := ref.Identity()
	fmt.Println(snap, snap.Provider(), snap.SnapshotID(), ok)

	_, ok = images.MustParseReference("alpine:3").Identity()
	fmt.Println("a tag has an identity:", ok)
	// Output:
	// index.docker.io/library/alpine@sha256:ab0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd true true <nil>
	// snapshot:daytona/snap-42 daytona snap-42 true
	// a tag has an identity: false
}
