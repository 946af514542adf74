package errmsg

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSentence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"stale revision 3: the stored revision is 4; reload and apply the change again (CFG-6)", "Stale revision 3: the stored revision is 4; reload and apply the change again."},
		{"reserved server-owned field (CFG-5, CAP-3)", "Reserved server-owned field."},
		{`"box" is taken`, `"box" is taken.`},
		{"CFG-9: environments are disabled", "Environments are disabled."},
		{"", ""},
		{"root@10.0.0.5:22 refused the key", "root@10.0.0.5:22 refused the key."},
	} {
		if got := Sentence(tc.in); got != tc.want {
			t.Errorf("Sentence(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := Sentence(strings.Repeat("word ", 100))
	if n := utf8.RuneCountInString(long); n > Max || !strings.HasSuffix(long, "…") {
		t.Errorf("a long message: %d characters, %q", n, long)
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ label, want string }{
		{`"build-box" (env_1)`, `environment "build-box"`},
		{`"build-box"`, `environment "build-box"`},
		{"env_1", "environment env_1"},
		{"", "environment"},
	} {
		if got := Name("environment", tc.label); got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.label, got, tc.want)
		}
	}
}
