package prp

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// NewID returns prefix + "_" + 16 random bytes in hex (from crypto/rand):
// a valid id on the wire (1-128 characters of [A-Za-z0-9._:-], starting
// with a letter or digit) when prefix is one, such as a task's or a run's.
func NewID(prefix string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("prp: new id: %w", err)
	}
	return prefix + "_" + hex.EncodeToString(b[:]), nil
}
