// Package resolve pins OCI image references to digests over the network
// (IMG-2). It is kept apart from package images so that the pure packages
// (images, qualification) do no I/O.
//
//	r := resolve.New(&resolve.Options{Keychain: authn.DefaultKeychain})
//	ref := images.MustParseReference("ghcr.io/acme/agent:1.2")
//	id, err := r.Pin(ctx, ref, v1.Platform{OS: "linux", Architecture: "arm64"})
//	pinned := id.Reference() // repo@sha256:<hex>
//
// New and Resolver.Pin are the entry points: Pin turns a tag into
// repo@sha256:<hex>, with a HEAD request where the registry allows and a
// GET otherwise, and picks the manifest of the requested platform out of a
// multi-platform index. Results are cached for a TTL on an injectable
// clock, and concurrent pins of one reference share one registry request.
// Credentials come from the host's authn.Keychain; plain HTTP is allowed
// only for loopback registries and registries the host lists.
package resolve
