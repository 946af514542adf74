// Package resolve pins OCI image references to digests over the network
// (IMG-2). It is kept apart from package images so that the pure packages
// (images, qualification) do no I/O.
//
// Start with New and Resolver.Pin (resolver.go): Pin turns a tag into
// repo@sha256:<hex>, with a HEAD request where the registry allows and a GET
// otherwise, and picks the manifest of the requested platform out of a
// multi-platform index (fetch.go). Results are cached for a TTL on an
// injectable clock, and concurrent pins of one reference share one registry
// request. Credentials come from the host's authn.Keychain; plain HTTP is
// allowed only for loopback registries and registries the host lists.
package resolve
