package qualification

import (
	"fmt"
	"strconv"
	"strings"
)

// requirementText returns a supported platform r as CanRun's reasons
// name it: "os/arch[/variant][ libc[>=version]]".
func requirementText(r Platform) string {
	s := r.OS + "/" + r.Arch
	if r.Variant != "" {
		s += "/" + r.Variant
	}
	if r.Libc != "" {
		s += " " + string(r.Libc)
		if r.LibcVersion != "" {
			s += ">=" + r.LibcVersion
		}
	}
	return s
}

// normalizeRequirement normalizes the names of a supported platform r,
// keeping an unset libc family unset (a static build) and its version
// (the minimum).
func normalizeRequirement(r Platform) Platform {
	r.OS = normalizeOS(r.OS)
	r.Arch, r.Variant = NormalizeArch(r.Arch, r.Variant)
	r.Libc = normalizeLibc(string(r.Libc))
	r.LibcVersion = strings.TrimSpace(r.LibcVersion)
	return r
}

// The codes of a Verdict (Verdict.Code).
const (
	// verdictOK: a requirement is met.
	verdictOK = "ok"
	// verdictNoRequirements: the artifact lists no platform.
	verdictNoRequirements = "no_requirements"
	// verdictNotMeasured: the platform was not measured.
	verdictNotMeasured = "platform_not_measured"
	// verdictUnsupportedPlatform: no build for the OS and architecture.
	verdictUnsupportedPlatform = "unsupported_platform"
	// verdictLibcMismatch: builds exist for the OS and architecture, but
	// for another libc family (glibc vs musl), or the platform has none.
	verdictLibcMismatch = "libc_mismatch"
	// verdictLibcTooOld: the platform's libc is older than required.
	verdictLibcTooOld = "libc_too_old"
	// verdictLibcUnknown: the platform's libc family or version is unknown,
	// so a libc requirement cannot be shown to hold.
	verdictLibcUnknown = "libc_unknown"
)

// Verdict says whether a platform can run an artifact and why not.
type Verdict struct {
	OK bool `json:"ok"`
	// Code is "ok" when a requirement is met, else the reason of the
	// closest failing requirement: "no_requirements" (the artifact lists
	// no platform), "platform_not_measured", "unsupported_platform" (no
	// build for the OS and architecture), "libc_mismatch" (builds for
	// another libc family, or the platform has none), "libc_too_old", or
	// "libc_unknown" (the platform's libc cannot be shown to meet one).
	Code string `json:"code"`
	// Reason is a human message ("needs glibc >= 2.36, platform has glibc 2.31").
	Reason string `json:"reason"`
	// Match is the supported platform that was met (OK) or came closest
	// (same OS and architecture); the zero Platform when none did.
	Match Platform `json:"match,omitzero"`
}

// CanRun reports whether platform p can run an artifact built for the
// platforms supported (QUAL-8): each names an OS, an architecture (and
// optional variant) and the C library the build needs, its LibcVersion
// being the minimum version ("" any version of the family); Libc "" or
// LibcNone is a static build that runs on any libc, and Kernel and the
// release are not read. A supported platform is met when OS and
// architecture match (and the variant, when it names one), and its libc
// family and minimum version hold: glibc needs glibc, musl needs musl,
// versions compare numerically (2.31 < 2.36). It is pure and
// conservative: an unknown libc meets no libc requirement.
func CanRun(p Platform, supported []Platform) Verdict {
	p = p.Normalize()
	if !p.measured() {
		return Verdict{Code: verdictNotMeasured, Reason: "the platform was not measured"}
	}
	if len(supported) == 0 {
		return Verdict{Code: verdictNoRequirements, Reason: "the artifact lists no supported platform"}
	}
	var closest *Verdict
	var listed []string
	for _, r := range supported {
		r = normalizeRequirement(r)
		listed = append(listed, requirementText(r))
		if r.OS != p.OS || r.Arch != p.Arch || (r.Variant != "" && r.Variant != p.Variant) {
			continue
		}
		v := checkLibc(p, r)
		if v.OK {
			return v
		}
		if closest == nil {
			closest = &v
		}
	}
	if closest != nil {
		return *closest
	}
	plat := p.OS + "/" + p.Arch
	if p.Variant != "" {
		plat += "/" + p.Variant
	}
	return Verdict{Code: verdictUnsupportedPlatform,
		Reason: fmt.Sprintf("no build for %s; the artifact supports %s", plat, strings.Join(listed, ", "))}
}

func checkLibc(p Platform, r Platform) Verdict {
	v := Verdict{Match: r}
	if r.Libc == "" || r.Libc == LibcNone {
		v.OK, v.Code, v.Reason = true, verdictOK, fmt.Sprintf("static build for %s/%s", r.OS, r.Arch)
		return v
	}
	switch {
	case p.Libc == LibcUnknown || p.Libc == "":
		v.Code, v.Reason = verdictLibcUnknown, fmt.Sprintf("needs %s, but the platform's libc is unknown", r.Libc)
		return v
	case p.Libc == LibcNone:
		v.Code, v.Reason = verdictLibcMismatch, fmt.Sprintf("needs %s, but the platform has no libc", r.Libc)
		return v
	case p.Libc != r.Libc:
		v.Code, v.Reason = verdictLibcMismatch, fmt.Sprintf("needs %s, but the platform has %s", r.Libc, p.Libc)
		return v
	}
	if r.LibcVersion != "" {
		if p.LibcVersion == "" {
			v.Code, v.Reason = verdictLibcUnknown, fmt.Sprintf("needs %s >= %s, but the platform's %s version is unknown", r.Libc, r.LibcVersion, p.Libc)
			return v
		}
		c, ok := compareVersions(p.LibcVersion, r.LibcVersion)
		if !ok {
			v.Code, v.Reason = verdictLibcUnknown, fmt.Sprintf("cannot compare %s version %q with %q", p.Libc, p.LibcVersion, r.LibcVersion)
			return v
		}
		if c < 0 {
			v.Code, v.Reason = verdictLibcTooOld, fmt.Sprintf("needs %s >= %s, but the platform has %s %s", r.Libc, r.LibcVersion, p.Libc, p.LibcVersion)
			return v
		}
	}
	v.OK, v.Code, v.Reason = true, verdictOK, fmt.Sprintf("%s build runs on %s %s", requirementText(r), p.Libc, p.LibcVersion)
	return v
}

// compareVersions compares dotted numeric versions numerically: -1 if a < b,
// 0 if equal, +1 if a > b ("2.31" < "2.36" < "2.100"; "2.31" == "2.31.0").
// Each component counts by its leading digits, so distribution suffixes are
// ignored ("2.36-9+deb12u4" is 2.36). ok is false when a component has no
// leading digit.
func compareVersions(a, b string) (int, bool) {
	as, aok := versionParts(a)
	bs, bok := versionParts(b)
	if !aok || !bok {
		return 0, false
	}
	for i := range max(len(as), len(bs)) {
		var x, y uint64
		if i < len(as) {
			x = as[i]
		}
		if i < len(bs) {
			y = bs[i]
		}
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
	}
	return 0, true
}

func versionParts(s string) ([]uint64, bool) {
	if s == "" {
		return nil, false
	}
	var out []uint64
	for _, part := range strings.Split(s, ".") {
		n := 0
		for n < len(part) && part[n] >= '0' && part[n] <= '9' {
			n++
		}
		if n == 0 {
			return nil, false
		}
		v, err := strconv.ParseUint(part[:n], 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
		if n < len(part) {
			// A suffix ("36-9+deb12u4", "0rc1") ends the numeric version.
			break
		}
	}
	return out, true
}
