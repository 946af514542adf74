package prpwire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/berthdev/berth/internal/prp"
)

// ValidID reports whether s is a valid id of a message, session, command,
// task, lease, run or company on the wire: 1-128 characters of
// [A-Za-z0-9._:-], starting with a letter or digit. Every id prp.NewID returns
// is valid.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// commandDigest returns the hex SHA-256 of the canonical JSON of c with its
// Digest field cleared: object keys sorted, no insignificant whitespace,
// bytes as base64. Two commands with the same id and a different digest are
// an idempotency conflict (PRP-4).
func commandDigest(c prp.Command) string {
	c.Digest = ""
	b, err := canonicalJSON(c)
	if err != nil {
		// A Command always marshals; this is a programmer error.
		panic("prpwire: command digest: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SealCommand sets c.Digest (the digest of the rest of c, which
// ValidateCommand checks) and returns c.
func SealCommand(c prp.Command) prp.Command {
	c.Digest = commandDigest(c)
	return c
}

// canonicalJSON marshals v, then re-marshals it through generic values so
// that every object's keys are sorted whatever produced it.
func canonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var g any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&g); err != nil {
		return nil, err
	}
	return json.Marshal(g)
}
