package prp

import (
	"fmt"
	"regexp"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prpkeys"
)

// ErrScopeDenied: a command for another lease or run than the runner's
// connection is for, or a task under a probe identity (PRP-7, PRP-8);
// Attachment.Start of a probe-scoped attachment wraps it too. Its code is
// scope_denied.
var ErrScopeDenied = wireError(errcode.Denied, "scope_denied", "prp: scope denied")

// keyIDRE is the form of a key id, in NewSigner and in a token.
var keyIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Signer holds the keys with which berth signs and verifies the runners'
// connection tokens (HMAC-SHA-256 under named keys: the current key signs,
// every key verifies, so keys can rotate) and derives each session's state
// key. It is opaque: berth.New builds one with NewSigner from
// Options.RunnerKeys (replicas share the keys); it never hands the keys
// back. A Signer is safe for concurrent use and never
// changes after NewSigner; a nil *Signer has no keys (nothing it signs
// verifies).
type Signer prpkeys.Keys

// NewSigner returns a Signer that signs with keys[current] and verifies
// with any of keys. Key ids are 1-32 characters of [A-Za-z0-9_-]; keys are
// at least 32 bytes (copied). An invalid id or key, or a current id that is
// not among the keys, is an error.
func NewSigner(current string, keys map[string][]byte) (*Signer, error) {
	byID := make(map[string][]byte, len(keys))
	for kid, k := range keys {
		if !keyIDRE.MatchString(kid) {
			return nil, fmt.Errorf("prp: signer: key id %q is invalid", kid)
		}
		if len(k) < 32 {
			return nil, fmt.Errorf("prp: signer: key %q is shorter than 32 bytes", kid)
		}
		byID[kid] = append([]byte(nil), k...)
	}
	if _, ok := byID[current]; !ok {
		return nil, fmt.Errorf("prp: signer: current key %q is not among the keys", current)
	}
	return (*Signer)(prpkeys.New(current, byID)), nil
}
