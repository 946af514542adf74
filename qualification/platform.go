package qualification

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/berthdev/berth/errcode"
)

// LibcFamily names the C library a platform provides.
type LibcFamily string

// The libc families. The empty LibcFamily means nothing was said; Normalize
// turns it into LibcUnknown when the platform is measured.
const (
	// LibcGlibc is the GNU C library (Debian, Ubuntu, Fedora, ...).
	LibcGlibc LibcFamily = "glibc"
	// LibcMusl is musl libc (Alpine, ...).
	LibcMusl LibcFamily = "musl"
	// LibcNone is a platform without a dynamic C library that binaries
	// could link against (busybox-only images, macOS's libSystem for Linux
	// binaries), or, in a platform CanRun is given as supported, a static
	// binary that needs none.
	LibcNone LibcFamily = "none"
	// LibcUnknown is a measured platform whose libc could not be told.
	LibcUnknown LibcFamily = "unknown"
)

// errInvalidPlatform is wrapped, with the input quoted, by the errors of
// ParsePlatform, Validate and UnmarshalText: errcode.Code says
// errcode.Invalid.
var errInvalidPlatform = errcode.New(errcode.Invalid, "qualification: invalid platform")

// Platform is a measured execution platform (PRB-2, PRB-3): operating
// system, CPU architecture (and variant), libc family and version, kernel
// release, and the OS release. It is a comparable value type; the zero
// Platform means "not measured".
//
// The text form is "<os>/<arch>[/<variant>]" followed by space-separated
// key=value pairs in this order, each only when set:
//
//	linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12
//
// Parse accepts the pairs in any order and normalizes names ("x86_64" is
// "amd64", "aarch64" is "arm64", "Linux" is "linux", "Darwin" is "darwin").
// In JSON a Platform is its text form (MarshalText).
type Platform struct {
	OS      string
	Arch    string
	Variant string
	// Libc is the C library family; LibcVersion its version ("2.36"),
	// empty when unknown or for LibcNone.
	Libc        LibcFamily
	LibcVersion string
	// Kernel is the kernel release (uname -r).
	Kernel string
	// ReleaseID and ReleaseVersion come from os-release (ID, VERSION_ID),
	// or sw_vers on macOS ("macos", "14.4.1").
	ReleaseID      string
	ReleaseVersion string
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,31}$`)
	variantRE = regexp.MustCompile(`^[a-z0-9]{1,16}$`)
	// valueRE bounds free-text values (versions, kernel releases): printable,
	// no whitespace, no '='.
	valueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+~:@/,-]{0,127}$`)
)

var osAliases = map[string]string{
	"macos": "darwin", "mac": "darwin", "osx": "darwin", "macosx": "darwin", "mac os x": "darwin",
	"gnu/linux": "linux",
}

var archAliases = map[string]struct{ arch, variant string }{
	"x86_64": {"amd64", ""}, "x86-64": {"amd64", ""}, "x64": {"amd64", ""},
	"aarch64": {"arm64", ""}, "arm64e": {"arm64", ""}, "armv8": {"arm64", ""}, "armv8l": {"arm", "v8"},
	"i386": {"386", ""}, "i486": {"386", ""}, "i586": {"386", ""}, "i686": {"386", ""}, "x86": {"386", ""},
	"armv7l": {"arm", "v7"}, "armv7": {"arm", "v7"}, "armhf": {"arm", "v7"},
	"armv6l": {"arm", "v6"}, "armv6": {"arm", "v6"}, "armel": {"arm", "v6"},
	"ppc64el": {"ppc64le", ""},
}

var libcAliases = map[string]LibcFamily{
	"glibc": LibcGlibc, "gnu": LibcGlibc, "gnu libc": LibcGlibc, "libc6": LibcGlibc, "eglibc": LibcGlibc,
	"musl": LibcMusl, "musl libc": LibcMusl,
	"none": LibcNone, "static": LibcNone,
	"unknown": LibcUnknown,
}

// normalizeOS returns the canonical name of an operating system name
// ("Linux" is "linux", "Darwin" and "macOS" are "darwin").
func normalizeOS(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if a, ok := osAliases[s]; ok {
		return a
	}
	return s
}

// NormalizeArch returns the canonical architecture and variant of a machine
// name ("x86_64" is amd64, "aarch64" is arm64, "armv7l" is arm v7). variant
// is kept when the name implies none.
func NormalizeArch(arch, variant string) (string, string) {
	arch = strings.ToLower(strings.TrimSpace(arch))
	variant = strings.ToLower(strings.TrimSpace(variant))
	if a, ok := archAliases[arch]; ok {
		arch = a.arch
		if a.variant != "" {
			variant = a.variant
		}
	}
	if arch == "arm64" && variant == "v8" {
		variant = "" // arm64's only variant; the default
	}
	return arch, variant
}

// normalizeLibc returns the canonical libc family ("GNU" is glibc, "static"
// is none). Names it does not know are returned lower-cased.
func normalizeLibc(s string) LibcFamily {
	s = strings.ToLower(strings.TrimSpace(s))
	if f, ok := libcAliases[s]; ok {
		return f
	}
	return LibcFamily(s)
}

// Normalize returns p with canonical names: OS, architecture, variant and
// libc family normalized; an unset libc family of a measured platform is
// LibcUnknown; LibcNone and LibcUnknown carry no version. It does not
// validate; see Validate.
func (p Platform) Normalize() Platform {
	p.OS = normalizeOS(p.OS)
	p.Arch, p.Variant = NormalizeArch(p.Arch, p.Variant)
	p.Libc = normalizeLibc(string(p.Libc))
	if p.Libc == "" && p.measured() {
		p.Libc = LibcUnknown
	}
	if p.Libc == LibcNone || p.Libc == LibcUnknown {
		p.LibcVersion = ""
	}
	p.LibcVersion = strings.TrimSpace(p.LibcVersion)
	p.Kernel = strings.TrimSpace(p.Kernel)
	p.ReleaseID = strings.ToLower(strings.TrimSpace(p.ReleaseID))
	p.ReleaseVersion = strings.TrimSpace(p.ReleaseVersion)
	return p
}

// Validate returns nil if p is the zero Platform or a normalized, measured
// platform whose fields all have valid forms; otherwise an error (code
// errcode.Invalid) that names the field.
func (p Platform) Validate() error {
	if p == (Platform{}) {
		return nil
	}
	bad := func(field, v string) error {
		return fmt.Errorf("%w: field %s: %q", errInvalidPlatform, field, v)
	}
	if !p.measured() {
		return fmt.Errorf("%w: os and arch are required once any field is set", errInvalidPlatform)
	}
	if n := p.Normalize(); n != p {
		return fmt.Errorf("%w: %q is not normalized (want %q)", errInvalidPlatform, p.String(), n.String())
	}
	switch {
	case !nameRE.MatchString(p.OS):
		return bad("os", p.OS)
	case !nameRE.MatchString(p.Arch):
		return bad("arch", p.Arch)
	case p.Variant != "" && !variantRE.MatchString(p.Variant):
		return bad("variant", p.Variant)
	case p.Libc != LibcGlibc && p.Libc != LibcMusl && p.Libc != LibcNone && p.Libc != LibcUnknown:
		return bad("libc", string(p.Libc))
	case p.LibcVersion != "" && !valueRE.MatchString(p.LibcVersion):
		return bad("libcVersion", p.LibcVersion)
	case p.Kernel != "" && !valueRE.MatchString(p.Kernel):
		return bad("kernel", p.Kernel)
	case p.ReleaseID != "" && !nameRE.MatchString(p.ReleaseID):
		return bad("releaseId", p.ReleaseID)
	case p.ReleaseVersion != "" && !valueRE.MatchString(p.ReleaseVersion):
		return bad("releaseVersion", p.ReleaseVersion)
	case p.ReleaseVersion != "" && p.ReleaseID == "":
		return fmt.Errorf("%w: releaseVersion %q without releaseId", errInvalidPlatform, p.ReleaseVersion)
	}
	return nil
}

// Measured reports whether p says at least which OS and architecture it is;
// the zero Platform is not measured (QUAL-1).
func (p Platform) measured() bool { return p.OS != "" && p.Arch != "" }

// IsZero reports whether p is the zero Platform.
func (p Platform) IsZero() bool { return p == Platform{} }

// String returns the text form; "" for the zero Platform.
func (p Platform) String() string {
	if p.IsZero() {
		return ""
	}
	var b strings.Builder
	b.WriteString(p.OS + "/" + p.Arch)
	if p.Variant != "" {
		b.WriteString("/" + p.Variant)
	}
	if p.Libc != "" {
		b.WriteString(" libc=" + string(p.Libc))
		if p.LibcVersion != "" {
			b.WriteString(":" + p.LibcVersion)
		}
	}
	if p.Kernel != "" {
		b.WriteString(" kernel=" + p.Kernel)
	}
	if p.ReleaseID != "" {
		b.WriteString(" release=" + p.ReleaseID)
		if p.ReleaseVersion != "" {
			b.WriteString(":" + p.ReleaseVersion)
		}
	}
	return b.String()
}

// ParsePlatform parses the text form (see Platform), normalizes it and
// validates it. The empty string is the zero Platform. Errors have the code
// errcode.Invalid and quote s.
func ParsePlatform(s string) (Platform, error) {
	if strings.TrimSpace(s) == "" {
		return Platform{}, nil
	}
	fields := strings.Fields(s)
	var p Platform
	parts := strings.Split(fields[0], "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Platform{}, fmt.Errorf("%w %q: want <os>/<arch>[/<variant>]", errInvalidPlatform, s)
	}
	p.OS, p.Arch = parts[0], parts[1]
	if len(parts) == 3 {
		p.Variant = parts[2]
		if p.Variant == "" {
			return Platform{}, fmt.Errorf("%w %q: empty variant", errInvalidPlatform, s)
		}
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || v == "" || seen[k] {
			return Platform{}, fmt.Errorf("%w %q: bad or repeated pair %q", errInvalidPlatform, s, f)
		}
		seen[k] = true
		switch k {
		case "libc":
			fam, ver, _ := strings.Cut(v, ":")
			p.Libc, p.LibcVersion = LibcFamily(fam), ver
			if fam == "" {
				return Platform{}, fmt.Errorf("%w %q: empty libc family", errInvalidPlatform, s)
			}
		case "kernel":
			p.Kernel = v
		case "release":
			p.ReleaseID, p.ReleaseVersion, _ = strings.Cut(v, ":")
		default:
			return Platform{}, fmt.Errorf("%w %q: unknown key %q", errInvalidPlatform, s, k)
		}
	}
	p = p.Normalize()
	if err := p.Validate(); err != nil {
		return Platform{}, fmt.Errorf("%w %q: %w", errInvalidPlatform, s, err)
	}
	return p, nil
}

// MarshalText implements encoding.TextMarshaler; the zero Platform is "".
func (p Platform) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePlatform.
func (p *Platform) UnmarshalText(b []byte) error {
	v, err := ParsePlatform(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
