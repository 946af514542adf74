package resolve

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestParsePlatform(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want v1.Platform
	}{
		{"linux/amd64", amd64},
		{"linux/x86_64", amd64},
		{"Linux/AArch64", arm64},
		{"linux/arm/v7", armv7},
		// The one alias table (qualification.NormalizeArch) also knows
		// machine names the old local table did not.
		{"linux/armv7l", armv7},
		{"linux/i686", v1.Platform{OS: "linux", Architecture: "386"}},
		{"linux/arm64/v8", arm64},
	}
	for _, tt := range good {
		got, err := ParsePlatform(tt.in)
		if err != nil {
			t.Errorf("ParsePlatform(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParsePlatform(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
	for _, in := range []string{"", "linux", "/amd64", "linux/", "linux/amd64 libc=glibc", "linux/amd64/v2/x", "lin ux/amd64"} {
		_, err := ParsePlatform(in)
		if err == nil || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParsePlatform(%q) error = %v, want an error quoting the input", in, err)
		}
	}
}
