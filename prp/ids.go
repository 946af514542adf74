package prp

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// ValidID reports whether s is a valid id of a message, session, command,
// task, lease, run or company on the wire: 1-128 characters of
// [A-Za-z0-9._:-], starting with a letter or digit. Every id NewID returns
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

// NewID returns prefix + "_" + 16 random bytes in hex (from crypto/rand):
// a valid id (ValidID) when prefix is one, such as a task's or a run's.
func NewID(prefix string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("prp: new id: %w", err)
	}
	return prefix + "_" + hex.EncodeToString(b[:]), nil
}
