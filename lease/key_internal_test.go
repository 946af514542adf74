package lease

import (
	"fmt"
	"strings"
	"testing"
)

// The run keys stored by earlier versions were fmt.Sprintf("run:%q:%q:%q"):
// quotedKey must produce the same bytes, or a run acquiring again after an
// upgrade would not find its lease (LEASE-8).
func TestQuotedKeyIsSprintfQ(t *testing.T) {
	for _, parts := range [][3]string{
		{"acme", "env-1", "run-1"},
		{"", "", ""},
		{`a"b`, `c\d`, "e:f"},
		{"ünï\u00a0cödé", "tab\there", "nl\nx\x00\xff"},
		{strings.Repeat("long", 64), "emoji 🚀", "\u2028"},
	} {
		want := fmt.Sprintf("run:%q:%q:%q", parts[0], parts[1], parts[2])
		if got := quotedKey("run:", parts[0], parts[1], parts[2]); got != want {
			t.Errorf("quotedKey(%q) = %q, want %q", parts, got, want)
		}
	}
}
