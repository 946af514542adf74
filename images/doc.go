// Package images holds pure value types for container images: OCI reference
// parsing and normalization, and Identity, the immutable identity of an image
// (an OCI manifest digest, or a provider snapshot id).
//
// Nothing in this package does I/O. Pinning a tag to a digest over the
// network is the job of package images/resolve.
package images
