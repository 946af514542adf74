package prp

import (
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"a": true, "s_1": true, "A.b:c-d_e9": true, strings.Repeat("x", 128): true,
		"": false, "_a": false, ".a": false, "-a": false, ":a": false, "a/b": false, "a b": false,
		"a\n": false, "é": false, strings.Repeat("x", 129): false,
	} {
		if got := ValidID(s); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", s, got, want)
		}
	}
}
