package qualify

import (
	"strings"
	"testing"
)

// FuzzParseDetection: the detection parser never panics, and whatever it accepts is a
// measured, valid platform.
func FuzzParseDetection(f *testing.F) {
	for _, name := range []string{
		"debian12-glibc.txt", "alpine319-musl.txt", "busybox-static.txt",
		"macos14-arm64.txt", "macos-no-sw_vers.txt",
	} {
		f.Add(readTestdata(f, name))
	}
	f.Add("")
	f.Add("@@berth-probe:begin v1@@\n@@berth-probe:uname-s@@\nLinux\n@@berth-probe:uname-m@@\nx86_64\n")
	f.Add("@@berth-probe:begin v1@@\n@@berth-probe:uname-s@@\n=\n@@berth-probe:uname-m@@\n/\n@@berth-probe:ldd@@\nldd () 1.1\n")
	f.Add(strings.Repeat("@@berth-probe:begin v1@@\n", 3))
	f.Fuzz(func(t *testing.T, out string) {
		d, err := ParseDetection(out)
		if err != nil {
			return
		}
		if d.Platform.OS == "" || d.Platform.Arch == "" {
			t.Fatalf("accepted an unmeasured platform %q", d.Platform)
		}
		if err := d.Platform.Validate(); err != nil {
			t.Fatalf("accepted an invalid platform %q: %v", d.Platform, err)
		}
	})
}
