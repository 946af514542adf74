package qualification

import (
	"strings"
	"testing"
)

// QUAL-8: whether a qualified platform can run a runner artifact, and why not.
func TestCanRun(t *testing.T) {
	t.Parallel()
	artifact := []Platform{
		{OS: "linux", Arch: "amd64", Libc: LibcGlibc, LibcVersion: "2.36"},
		{OS: "linux", Arch: "amd64", Libc: LibcMusl, LibcVersion: "1.2"},
		{OS: "linux", Arch: "arm64", Libc: LibcGlibc, LibcVersion: "2.31"},
		{OS: "darwin", Arch: "arm64"},
	}
	static := []Platform{{OS: "linux", Arch: "amd64", Libc: LibcNone}}
	tests := []struct {
		name    string
		p       string
		reqs    []Platform
		ok      bool
		code    string
		mention string
	}{
		{"glibc 2.36 meets glibc >= 2.36", "linux/amd64 libc=glibc:2.36", artifact, true, verdictOK, "glibc"},
		{"versions compare numerically: 2.100 is newer than 2.36", "linux/amd64 libc=glibc:2.100", artifact, true, verdictOK, ""},
		{"glibc 2.31 is older than 2.36", "linux/amd64 libc=glibc:2.31", artifact, false, verdictLibcTooOld, "needs glibc >= 2.36, but the platform has glibc 2.31"},
		{"musl build runs on musl", "linux/amd64 libc=musl:1.2.4", artifact, true, verdictOK, "musl"},
		{"arm64 glibc 2.31 meets 2.31", "linux/aarch64 libc=glibc:2.31", artifact, true, verdictOK, ""},
		{"glibc-only arm64 build does not run on musl", "linux/arm64 libc=musl:1.2.4", artifact, false, verdictLibcMismatch, "needs glibc, but the platform has musl"},
		{"a libc build does not run where there is no libc", "linux/arm64 libc=none", artifact, false, verdictLibcMismatch, "no libc"},
		{"an unknown libc meets no libc requirement", "linux/arm64 libc=unknown", artifact, false, verdictLibcUnknown, "unknown"},
		{"a known family without a version cannot show a minimum", "linux/arm64 libc=glibc", artifact, false, verdictLibcUnknown, "version is unknown"},
		{"a static binary runs on musl", "linux/amd64 libc=musl:1.2.4", static, true, verdictOK, "static"},
		{"a static binary runs without libc", "linux/amd64 libc=none", static, true, verdictOK, "static"},
		{"a static binary runs on an unknown libc", "linux/amd64 libc=unknown", static, true, verdictOK, "static"},
		{"darwin build without libc requirement", "darwin/arm64 libc=none", artifact, true, verdictOK, ""},
		{"no build for the architecture", "linux/s390x libc=glibc:2.36", artifact, false, verdictUnsupportedPlatform, "no build for linux/s390x"},
		{"no build for the OS", "windows/amd64", artifact, false, verdictUnsupportedPlatform, "linux/amd64 glibc>=2.36"},
		{"an unmeasured platform runs nothing", "", artifact, false, verdictNotMeasured, "not measured"},
		{"an artifact without requirements runs nowhere", "linux/amd64 libc=glibc:2.36", nil, false, verdictNoRequirements, "no supported platform"},
		{"requirement names are normalized too", "linux/amd64 libc=glibc:2.36", []Platform{{OS: "Linux", Arch: "x86_64", Libc: "GNU", LibcVersion: "2.17"}}, true, verdictOK, ""},
		{"a variant requirement must match", "linux/armv7l libc=glibc:2.36", []Platform{{OS: "linux", Arch: "arm", Variant: "v6"}}, false, verdictUnsupportedPlatform, "linux/arm/v7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := CanRun(mustParsePlatform(tt.p), tt.reqs)
			if v.OK != tt.ok || v.Code != tt.code {
				t.Fatalf("CanRun(%q) = %v %s (%s); want %v %s", tt.p, v.OK, v.Code, v.Reason, tt.ok, tt.code)
			}
			if !strings.Contains(v.Reason, tt.mention) {
				t.Errorf("reason %q does not mention %q", v.Reason, tt.mention)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
		ok   bool
	}{
		{"2.31", "2.36", -1, true},
		{"2.36", "2.31", 1, true},
		{"2.100", "2.36", 1, true},
		{"2.31", "2.31.0", 0, true},
		{"2.36-9+deb12u4", "2.36", 0, true},
		{"1.2.4", "1.2", 1, true},
		{"1.10", "1.9", 1, true},
		{"", "1", 0, false},
		{"abc", "1", 0, false},
		{"1..2", "1", 0, false},
	}
	for _, tt := range tests {
		got, ok := compareVersions(tt.a, tt.b)
		if got != tt.want || ok != tt.ok {
			t.Errorf("compareVersions(%q, %q) = %d, %v; want %d, %v", tt.a, tt.b, got, ok, tt.want, tt.ok)
		}
	}
}
