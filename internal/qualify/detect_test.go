package qualify

import (
	"errors"
	"github.com/berthdev/berth/qualification"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Real outputs (see testdata/README) parse to the platform they describe
// (PRB-2, PRB-3).
func TestParseDetectionRealOutputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want Detection
	}{
		{"debian12-glibc.txt", Detection{
			Platform: mustPlatform("linux/amd64 libc=glibc:2.36 kernel=6.18.44-fc-v782 release=debian:12"),
			Hostname: "vm", Cwd: "/work/main/probe", PrettyName: "Debian GNU/Linux 12 (bookworm)",
		}},
		{"alpine319-musl.txt", Detection{
			Platform: mustPlatform("linux/amd64 libc=musl:1.2.4 kernel=6.6.16-0-lts release=alpine:3.19.1"),
			Hostname: "3f2c1a9e0b7d", Cwd: "/", PrettyName: "Alpine Linux v3.19",
		}},
		{"busybox-static.txt", Detection{
			Platform: mustPlatform("linux/amd64 libc=none kernel=6.18.44-fc-v782"),
			Hostname: "37456d9716b4", Cwd: "/",
		}},
		{"macos14-arm64.txt", Detection{
			Platform: mustPlatform("darwin/arm64 libc=none kernel=23.4.0 release=macos:14.4.1"),
			Hostname: "mbp.local", Cwd: "/Users/dev", PrettyName: "macOS 14.4.1",
		}},
		{"macos-no-sw_vers.txt", Detection{
			Platform: mustPlatform("darwin/arm64 libc=none kernel=23.4.0"),
			Hostname: "mbp.local", Cwd: "/Users/dev",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := ParseDetection(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("ParseDetection: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("detection (-want +got):\n%s", diff)
			}
			if err := got.Platform.Validate(); err != nil {
				t.Errorf("platform %q does not validate: %v", got.Platform, err)
			}
		})
	}
}

// Variations of real outputs: libc evidence from one source only, login
// banners, CRLF, odd values. The parser tolerates missing tools.
func TestParseDetectionVariants(t *testing.T) {
	t.Parallel()
	debian := readTestdata(t, "debian12-glibc.txt")
	alpine := readTestdata(t, "alpine319-musl.txt")
	cut := func(s, section string) string { // empties one section
		lines := strings.Split(s, "\n")
		var out []string
		skip := false
		for _, l := range lines {
			if name, ok := markerName(l); ok {
				skip = name == section
				out = append(out, l)
				continue
			}
			if !skip {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	tests := []struct {
		name, in, want string
	}{
		{"glibc from getconf only", cut(debian, secLdd), "linux/amd64 libc=glibc:2.36 kernel=6.18.44-fc-v782 release=debian:12"},
		{"glibc without version from the loader only", cut(cut(debian, secLdd), secGetconf), "linux/amd64 libc=glibc kernel=6.18.44-fc-v782 release=debian:12"},
		{"GNU libc banner", strings.Replace(debian, "ldd (Debian GLIBC 2.36-9+deb12u14) 2.36", "ldd (GNU libc) 2.39", 1), "linux/amd64 libc=glibc:2.39 kernel=6.18.44-fc-v782 release=debian:12"},
		{"musl from the loader only", cut(alpine, secLdd), "linux/amd64 libc=musl kernel=6.6.16-0-lts release=alpine:3.19.1"},
		{"login banner before the marker", "Welcome to host\nLast login: yesterday\n" + alpine, "linux/amd64 libc=musl:1.2.4 kernel=6.6.16-0-lts release=alpine:3.19.1"},
		{"CRLF line ends", strings.ReplaceAll(alpine, "\n", "\r\n"), "linux/amd64 libc=musl:1.2.4 kernel=6.6.16-0-lts release=alpine:3.19.1"},
		{"aarch64", strings.Replace(alpine, "\nx86_64\n", "\naarch64\n", 1), "linux/arm64 libc=musl:1.2.4 kernel=6.6.16-0-lts release=alpine:3.19.1"},
		{"unknown ldd banner", strings.Replace(cut(cut(debian, secGetconf), secGnuLoader), "ldd (Debian GLIBC 2.36-9+deb12u14) 2.36", "ldd: some other loader 1.0", 1), "linux/amd64 libc=unknown kernel=6.18.44-fc-v782 release=debian:12"},
		{"kernel with spaces is dropped", strings.Replace(debian, "6.18.44-fc-v782", "6.1 weird kernel", 1), "linux/amd64 libc=glibc:2.36 release=debian:12"},
		{"no end marker (cut off)", strings.Split(alpine, "@@berth-probe:os-release@@")[0], "linux/amd64 libc=musl:1.2.4 kernel=6.6.16-0-lts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			det, err := ParseDetection(tt.in)
			got := det.Platform
			if err != nil {
				t.Fatalf("ParseDetection: %v", err)
			}
			if got.String() != tt.want {
				t.Errorf("platform = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseDetectionErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"not the script's output", "Linux\nx86_64\n"},
		{"no uname", "@@berth-probe:begin v1@@\n@@berth-probe:uname-s@@\nsh: uname: not found\n@@berth-probe:end@@\n"},
		{"uname missing arch", "@@berth-probe:begin v1@@\n@@berth-probe:uname-s@@\nLinux\n@@berth-probe:uname-m@@\n@@berth-probe:end@@\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			det, err := ParseDetection(tt.in)
			p := det.Platform
			if !errors.Is(err, ErrDetection) {
				t.Fatalf("ParseDetection = %q, %v; want an error wrapping ErrDetection", p, err)
			}
		})
	}
}

// mustPlatform is qualification.ParsePlatform that panics on error.
func mustPlatform(s string) qualification.Platform {
	p, err := qualification.ParsePlatform(s)
	if err != nil {
		panic(err)
	}
	return p
}
