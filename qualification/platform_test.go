package qualification

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// PRB-2 / QUAL-2: platform names are normalized and have one text form.
func TestParsePlatformGood(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     Platform
		text     string
	}{
		{"empty is the zero platform (not measured)", "", Platform{}, ""},
		{"x86_64 is amd64 and Linux is linux", "Linux/x86_64", Platform{OS: "linux", Arch: "amd64", Libc: LibcUnknown}, "linux/amd64 libc=unknown"},
		{"aarch64 is arm64", "linux/aarch64 libc=glibc:2.36", Platform{OS: "linux", Arch: "arm64", Libc: LibcGlibc, LibcVersion: "2.36"}, "linux/arm64 libc=glibc:2.36"},
		{"arm64 v8 is plain arm64", "linux/arm64/v8 libc=musl:1.2.4", Platform{OS: "linux", Arch: "arm64", Libc: LibcMusl, LibcVersion: "1.2.4"}, "linux/arm64 libc=musl:1.2.4"},
		{"armv7l is arm v7", "linux/armv7l libc=glibc:2.31", Platform{OS: "linux", Arch: "arm", Variant: "v7", Libc: LibcGlibc, LibcVersion: "2.31"}, "linux/arm/v7 libc=glibc:2.31"},
		{"Darwin is darwin and keeps kernel and release", "Darwin/arm64 libc=none kernel=23.4.0 release=macos:14.4.1",
			Platform{OS: "darwin", Arch: "arm64", Libc: LibcNone, Kernel: "23.4.0", ReleaseID: "macos", ReleaseVersion: "14.4.1"},
			"darwin/arm64 libc=none kernel=23.4.0 release=macos:14.4.1"},
		{"pairs in any order, GNU is glibc", "linux/amd64 release=debian:12 kernel=6.1.0-18-amd64 libc=GNU:2.36",
			Platform{OS: "linux", Arch: "amd64", Libc: LibcGlibc, LibcVersion: "2.36", Kernel: "6.1.0-18-amd64", ReleaseID: "debian", ReleaseVersion: "12"},
			"linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12"},
		{"busybox-only image has no libc", "linux/amd64 libc=none kernel=6.1.0", Platform{OS: "linux", Arch: "amd64", Libc: LibcNone, Kernel: "6.1.0"}, "linux/amd64 libc=none kernel=6.1.0"},
		{"none carries no version", "linux/amd64 libc=static:1.0", Platform{OS: "linux", Arch: "amd64", Libc: LibcNone}, "linux/amd64 libc=none"},
		{"WSL kernel string", "linux/amd64 libc=glibc:2.35 kernel=5.15.153.1-microsoft-standard-WSL2",
			Platform{OS: "linux", Arch: "amd64", Libc: LibcGlibc, LibcVersion: "2.35", Kernel: "5.15.153.1-microsoft-standard-WSL2"},
			"linux/amd64 libc=glibc:2.35 kernel=5.15.153.1-microsoft-standard-WSL2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePlatform(tt.in)
			if err != nil {
				t.Fatalf("ParsePlatform(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePlatform(%q) (-want +got):\n%s", tt.in, diff)
			}
			if got.String() != tt.text {
				t.Errorf("String() = %q, want %q", got.String(), tt.text)
			}
			if again := mustParsePlatform(got.String()); again != got {
				t.Errorf("round trip: %+v != %+v", again, got)
			}
		})
	}
}

func TestParsePlatformBad(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in string }{
		{"os only", "linux"},
		{"empty arch", "linux/"},
		{"too many slashes", "linux/arm/v7/x"},
		{"empty variant", "linux/arm/"},
		{"unknown key", "linux/amd64 cpu=8"},
		{"repeated key", "linux/amd64 kernel=1 kernel=2"},
		{"pair without value", "linux/amd64 kernel="},
		{"pair without equals", "linux/amd64 glibc"},
		{"unknown libc family", "linux/amd64 libc=bionic:1"},
		{"empty libc family", "linux/amd64 libc=:2.36"},
		{"release version without id", "linux/amd64 release=:12"},
		{"bad os characters", "li$nux/amd64"},
		{"kernel with equals", "linux/amd64 kernel=a=b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParsePlatform(tt.in)
			if !errors.Is(err, errInvalidPlatform) {
				t.Fatalf("ParsePlatform(%q) error = %v, want errInvalidPlatform", tt.in, err)
			}
			if !strings.Contains(err.Error(), jsonQuote(tt.in)) {
				t.Errorf("error %q does not quote %q", err, tt.in)
			}
		})
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestPlatformNormalizeAndValidate(t *testing.T) {
	t.Parallel()
	raw := Platform{OS: " Linux ", Arch: "X86_64", Libc: "musl", LibcVersion: "1.2.4", ReleaseID: "Alpine", ReleaseVersion: "3.19.1"}
	if err := raw.Validate(); !errors.Is(err, errInvalidPlatform) {
		t.Errorf("Validate of an unnormalized platform: %v, want errInvalidPlatform", err)
	}
	n := raw.Normalize()
	want := Platform{OS: "linux", Arch: "amd64", Libc: LibcMusl, LibcVersion: "1.2.4", ReleaseID: "alpine", ReleaseVersion: "3.19.1"}
	if diff := cmp.Diff(want, n); diff != "" {
		t.Errorf("Normalize (-want +got):\n%s", diff)
	}
	if err := n.Validate(); err != nil {
		t.Errorf("Validate(normalized): %v", err)
	}
	if n.Normalize() != n {
		t.Error("Normalize is not idempotent")
	}
	if err := (Platform{Kernel: "6.1"}).Validate(); !errors.Is(err, errInvalidPlatform) {
		t.Errorf("a platform with a kernel but no os/arch validated: %v", err)
	}
	if (Platform{}).measured() || !n.measured() {
		t.Error("Measured is wrong")
	}
}

func TestPlatformText(t *testing.T) {
	t.Parallel()
	type doc struct {
		P Platform `json:"p"`
	}
	in := doc{P: mustParsePlatform("linux/arm64 libc=glibc:2.36")}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"p":"linux/arm64 libc=glibc:2.36"}`; string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("unmarshal = %+v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"p":"linux"}`), &out); !errors.Is(err, errInvalidPlatform) {
		t.Errorf("unmarshal of a bad platform: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("mustParsePlatform of a bad platform did not panic")
		}
	}()
	mustParsePlatform("bad")
}

// FuzzParsePlatform checks that every accepted platform is normalized and
// valid, and round-trips through String.
func FuzzParsePlatform(f *testing.F) {
	for _, s := range []string{
		"", "linux/amd64", "Linux/x86_64 libc=glibc:2.36", "linux/aarch64 libc=musl:1.2.4 kernel=6.6.7-0-lts release=alpine:3.19.1",
		"darwin/arm64 libc=none kernel=23.4.0 release=macos:14.4.1", "linux/armv7l", "linux/arm64/v8", "linux/amd64 kernel=a kernel=b",
		"linux/amd64 libc=unknown:1", "x/y release=a:b:c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePlatform(s)
		if err != nil {
			if !errors.Is(err, errInvalidPlatform) {
				t.Fatalf("ParsePlatform(%q): %v does not wrap errInvalidPlatform", s, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParsePlatform(%q) = %+v, which does not validate: %v", s, p, err)
		}
		again, err := ParsePlatform(p.String())
		if err != nil || again != p {
			t.Fatalf("round trip %q -> %q -> %+v, %v", s, p.String(), again, err)
		}
	})
}

// mustParsePlatform is ParsePlatform that panics on error; for tests.
func mustParsePlatform(s string) Platform {
	p, err := ParsePlatform(s)
	if err != nil {
		panic(err)
	}
	return p
}
