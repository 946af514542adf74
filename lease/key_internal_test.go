package lease

import (
	"fmt"
	"github.com/berthdev/berth/internal/leasehook"
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

func TestNewLeaseIDAndOpOwner(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newLeaseID()
		if len(id) != 20 || !strings.HasPrefix(id, "lse_") || strings.Trim(id[4:], "0123456789abcdef") != "" || seen[id] {
			t.Fatalf("newLeaseID() = %q (seen before: %v), want lse_ and 16 new hex digits", id, seen[id])
		}
		seen[id] = true
	}
	m, _ := newManager(leasehook.Sources{Store: NewMemoryStore(), Options: &Options{InstanceID: "inst"}})
	a, b := m.opOwner(), m.opOwner()
	if a == b || !strings.HasPrefix(a, m.owner+"#") || !strings.HasSuffix(b, fmt.Sprint("#", m.opSeq.Load())) {
		t.Errorf("opOwner() = %q then %q, want %s#N with N growing", a, b, m.owner)
	}
}
