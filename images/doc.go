// Package images holds pure value types for container images: OCI reference
// parsing and normalization, and Identity, the immutable identity of an image
// (an OCI manifest digest, or a provider snapshot id).
//
//	ref, err := images.ParseReference("alpine") // ...library/alpine:latest
//	_, pinned := ref.Identity()                 // false: a tag moves
//	ref = images.MustParseReference("alpine@sha256:" + hex)
//	id, ok := ref.Identity() // what a live sandbox must report
//	if live != id { ... }    // another image: it does not qualify
//
// ParseReference reads OCI references by tag or digest and provider
// snapshot references by id ("snapshot:<provider>/<id>") or by name
// ("snapshot-name:<provider>/<name>"), normalizes them, and tells pinned
// references (a digest, a snapshot id) from mutable ones (a tag, also the
// implicit :latest, a snapshot name, a provider default). A pinned
// Reference gives its Identity, which is what a live sandbox reports and
// what qualification compares (IMG-1, IMG-3, QUAL-5).
//
// Nothing in this package does I/O. Pinning a tag to a digest over the
// network is the job of package images/resolve.
package images
