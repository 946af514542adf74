package qualify

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/qualification"
)

// markerPrefix starts every section marker line the detection script prints.
const markerPrefix = "@@berth-probe:"

// The sections of the detection script's output, in the order it prints
// them. begin and end frame the whole output.
const (
	secBegin     = "begin v1"
	secOS        = "uname-s"
	secArch      = "uname-m"
	secKernel    = "uname-r"
	secLdd       = "ldd"
	secGetconf   = "getconf"
	secMusl      = "ld-musl"
	secGnuLoader = "ld-linux"
	secOSRelease = "os-release"
	secSwVers    = "sw_vers"
	secHostname  = "hostname"
	secPwd       = "pwd"
	secEnd       = "end"
)

// DetectScript is the POSIX shell script a probe (or a runner) runs, with `sh -c`, in ONE
// Exec to measure the platform (PRB-2, PRB-3). It prints each tool's output
// after a marker line "@@berth-probe:<section>@@": uname -s, -m and -r; the
// libc probes (ldd --version with stderr, getconf GNU_LIBC_VERSION, the musl
// and glibc loaders under /lib); /etc/os-release; sw_vers -productVersion
// (macOS); hostname; pwd. Every command tolerates a missing tool (`2>/dev/null
// || true`), so the script always runs to its end marker.
//
// It uses only a flat list of simple commands, "||", and redirections of
// fd 2: it runs in busybox sh, dash, bash and macOS sh, which need no
// control flow, subshells or globbing (the globs of the loader checks expand
// in real shells). The fake driver recognises it by identity and answers
// from its platform profile.
const DetectScript = `echo '@@berth-probe:begin v1@@'
echo '@@berth-probe:uname-s@@'
uname -s 2>/dev/null || true
echo '@@berth-probe:uname-m@@'
uname -m 2>/dev/null || true
echo '@@berth-probe:uname-r@@'
uname -r 2>/dev/null || true
echo '@@berth-probe:ldd@@'
ldd --version 2>&1 || true
echo '@@berth-probe:getconf@@'
getconf GNU_LIBC_VERSION 2>/dev/null || true
echo '@@berth-probe:ld-musl@@'
ls /lib/ld-musl-* 2>/dev/null || true
echo '@@berth-probe:ld-linux@@'
ls /lib/ld-linux* /lib64/ld-linux* 2>/dev/null || true
echo '@@berth-probe:os-release@@'
cat /etc/os-release 2>/dev/null || true
echo '@@berth-probe:sw_vers@@'
sw_vers -productVersion 2>/dev/null || true
echo '@@berth-probe:hostname@@'
hostname 2>/dev/null || uname -n 2>/dev/null || true
echo '@@berth-probe:pwd@@'
pwd 2>/dev/null || true
echo '@@berth-probe:end@@'
`

// DetectArgv is the command line that runs DetectScript (a probe gives it
// to Sandbox.Exec): the script through sh -c. It returns a new slice.
func DetectArgv() []string { return []string{"sh", "-c", DetectScript} }

// ErrDetection is wrapped by ParseDetection errors: the
// output is not the detection script's, or it does not say which OS and
// architecture the target is.
var ErrDetection = errcode.New(errcode.Unsupported, "qualification: platform detection failed")

// Detection is what the detection script measured.
type Detection struct {
	// Platform is normalized and valid (Platform.Validate).
	Platform qualification.Platform `json:"platform"`
	// Hostname and Cwd are what hostname and pwd printed ("" if nothing).
	Hostname string `json:"hostname,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
	// PrettyName is PRETTY_NAME of /etc/os-release, or "macOS <version>".
	PrettyName string `json:"prettyName,omitempty"`
	// Notes lists fields that were measured but dropped because their
	// value had no valid form, and libc findings that were ambiguous.
	Notes []string `json:"notes,omitempty"`
}

// maxOutput bounds how much of an output the parser looks at.
const maxOutput = 256 << 10

var (
	// "ldd (GNU libc) 2.36", "ldd (Debian GLIBC 2.36-9+deb12u4) 2.36",
	// "ldd (Ubuntu EGLIBC 2.19-0ubuntu6) 2.19".
	glibcLddRE = regexp.MustCompile(`^ldd \(([^)]*)\) ([0-9]+\.[0-9]+(?:\.[0-9]+)?)`)
	muslLddRE  = regexp.MustCompile(`^musl libc\b`)
	versionRE  = regexp.MustCompile(`^Version ([0-9]+\.[0-9]+(?:\.[0-9]+)?)`)
	getconfRE  = regexp.MustCompile(`^glibc ([0-9]+\.[0-9]+(?:\.[0-9]+)?)`)
	notFoundRE = regexp.MustCompile(`(?i)(not found|no such file|cannot execute)`)
)

// ParseDetection parses the output of DetectScript. The output must contain
// the begin marker; sections may be missing or empty (a tool that is not
// installed). Rules:
//
//   - os, arch and kernel are the first lines of uname -s, -m, -r,
//     normalized (Linux is linux, x86_64 is amd64, aarch64 is arm64); a
//     missing os or arch is an error wrapping ErrDetection;
//   - libc: glibc with its version from "ldd (... GLIBC|GNU libc ...) V" or
//     getconf's "glibc V"; musl from ldd's "musl libc" banner (version from
//     its "Version V" line) or a /lib/ld-musl-* loader; glibc without a
//     version from a /lib*/ld-linux* loader; on Linux, none of these means
//     no C library (busybox-only images); on macOS the family is none (no
//     libc that Linux binaries link against); ldd output in another form
//     is unknown;
//   - release: ID and VERSION_ID of /etc/os-release, else "macos" and
//     sw_vers -productVersion;
//   - a measured value without a valid form (Platform
//     Validate) is dropped and named in Notes rather than failing.
func ParseDetection(output string) (Detection, error) {
	if len(output) > maxOutput {
		output = output[:maxOutput]
	}
	secs, err := sections(output)
	if err != nil {
		return Detection{}, err
	}
	var d Detection
	p := qualification.Platform{
		OS:     qualification.Platform{OS: firstLine(secs[secOS])}.Normalize().OS,
		Kernel: firstLine(secs[secKernel]),
	}
	p.Arch, p.Variant = qualification.NormalizeArch(firstLine(secs[secArch]), "")
	if p.OS == "" || p.Arch == "" {
		return Detection{}, fmt.Errorf("%w: uname printed no operating system or architecture", ErrDetection)
	}
	p.Libc, p.LibcVersion, d.Notes = libcOf(p.OS, secs)
	rel := osRelease(secs[secOSRelease])
	p.ReleaseID, p.ReleaseVersion = rel["ID"], rel["VERSION_ID"]
	d.PrettyName = rel["PRETTY_NAME"]
	if p.ReleaseID == "" && p.OS == "darwin" {
		if v := firstLine(secs[secSwVers]); v != "" && !notFoundRE.MatchString(v) {
			p.ReleaseID, p.ReleaseVersion = "macos", v
			d.PrettyName = "macOS " + v
		}
	}
	p, dropped, err := sanitize(p.Normalize())
	if err != nil {
		return Detection{}, err
	}
	d.Notes = append(d.Notes, dropped...)
	d.Platform = p
	d.Hostname = firstLine(secs[secHostname])
	d.Cwd = firstLine(secs[secPwd])
	return d, nil
}

// sections splits output at the marker lines. Text before the begin marker
// (a login banner) is ignored; a section that appears twice keeps its first
// occurrence.
func sections(output string) (map[string][]string, error) {
	output = strings.ReplaceAll(output, "\r\n", "\n")
	secs := map[string][]string{}
	cur, begun := "", false
	for line := range strings.SplitSeq(output, "\n") {
		if name, ok := markerName(line); ok {
			if name == secBegin {
				begun = true
			}
			if !begun {
				continue
			}
			if _, seen := secs[name]; seen || name == secEnd {
				cur = ""
				continue
			}
			cur = name
			secs[name] = nil
			continue
		}
		if begun && cur != "" && cur != secBegin {
			secs[cur] = append(secs[cur], line)
		}
	}
	if !begun {
		return nil, fmt.Errorf("%w: the output does not start with the detection script's marker %q", ErrDetection, markerPrefix+secBegin+"@@")
	}
	return secs, nil
}

func markerName(line string) (string, bool) {
	line = strings.TrimSpace(line)
	rest, ok := strings.CutPrefix(line, markerPrefix)
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "@@")
}

// firstLine returns the first non-empty line of lines, trimmed.
func firstLine(lines []string) string {
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// libcOf decides the libc family and version from the libc sections.
func libcOf(goos string, secs map[string][]string) (qualification.LibcFamily, string, []string) {
	var notes []string
	lddFamily, lddVersion, lddSaid := "", "", false
	for _, raw := range secs[secLdd] {
		l := strings.TrimSpace(raw)
		switch {
		case l == "":
		case glibcLddRE.MatchString(l) && lddFamily == "":
			m := glibcLddRE.FindStringSubmatch(l)
			inParens := strings.ToUpper(m[1])
			if strings.Contains(inParens, "GLIBC") || strings.Contains(inParens, "GNU LIBC") {
				lddFamily, lddVersion = "glibc", m[2]
			} else {
				lddSaid = true
			}
		case muslLddRE.MatchString(l) && lddFamily == "":
			lddFamily = "musl"
		case lddFamily == "musl" && lddVersion == "" && versionRE.MatchString(l):
			lddVersion = versionRE.FindStringSubmatch(l)[1]
		case lddFamily == "" && !notFoundRE.MatchString(l):
			lddSaid = true // ldd exists but printed something else
		}
	}
	getconfVersion := ""
	if m := getconfRE.FindStringSubmatch(firstLine(secs[secGetconf])); m != nil {
		getconfVersion = m[1]
	}
	muslLoader := hasLine(secs[secMusl], "ld-musl-")
	gnuLoader := hasLine(secs[secGnuLoader], "ld-linux")

	switch {
	case lddFamily == "glibc" || getconfVersion != "":
		v := lddVersion
		if v == "" {
			v = getconfVersion
		}
		if muslLoader {
			notes = append(notes, "a musl loader is present next to glibc; reporting glibc")
		}
		return qualification.LibcGlibc, v, notes
	case lddFamily == "musl" || muslLoader:
		return qualification.LibcMusl, lddVersion, notes
	case gnuLoader:
		return qualification.LibcGlibc, "", append(notes, "glibc loader found, but no ldd or getconf to tell its version")
	case goos == "darwin":
		return qualification.LibcNone, "", notes
	case lddSaid:
		return qualification.LibcUnknown, "", append(notes, "ldd printed a banner that names neither glibc nor musl")
	case goos == "linux":
		return qualification.LibcNone, "", notes
	}
	return qualification.LibcUnknown, "", notes
}

func hasLine(lines []string, substr string) bool {
	for _, l := range lines {
		if strings.Contains(l, substr) && !notFoundRE.MatchString(l) {
			return true
		}
	}
	return false
}

// osRelease parses KEY=value lines of os-release(5), unquoting values.
func osRelease(lines []string) map[string]string {
	out := map[string]string{}
	for _, l := range lines {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok || k == "" || strings.HasPrefix(k, "#") {
			continue
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		v = strings.ReplaceAll(v, `\"`, `"`)
		if _, seen := out[k]; !seen {
			out[k] = v
		}
	}
	return out
}

// sanitize drops optional fields whose values have no valid form, so that
// the result always passes Validate, and names what it dropped. It fails
// when the OS or architecture itself is not a valid name.
func sanitize(p qualification.Platform) (qualification.Platform, []string, error) {
	if p.Validate() == nil {
		return p, nil, nil
	}
	out := qualification.Platform{OS: p.OS, Arch: p.Arch, Variant: p.Variant, Libc: p.Libc}.Normalize()
	if out.Validate() != nil {
		return qualification.Platform{}, nil, fmt.Errorf("%w: uname printed os %q, arch %q: not valid names", ErrDetection, p.OS, p.Arch)
	}
	var notes []string
	// Add each optional field alone, so that one bad value does not take
	// the others with it.
	add := func(field, value string, set func(*qualification.Platform)) {
		q := out
		set(&q)
		if q = q.Normalize(); q.Validate() == nil {
			out = q
		} else if value != "" {
			notes = append(notes, fmt.Sprintf("dropped %s %q: not a valid value", field, value))
		}
	}
	add("libc version", p.LibcVersion, func(q *qualification.Platform) { q.LibcVersion = p.LibcVersion })
	add("kernel", p.Kernel, func(q *qualification.Platform) { q.Kernel = p.Kernel })
	add("release id", p.ReleaseID, func(q *qualification.Platform) { q.ReleaseID = p.ReleaseID })
	if out.ReleaseID != "" {
		add("release version", p.ReleaseVersion, func(q *qualification.Platform) { q.ReleaseVersion = p.ReleaseVersion })
	}
	return out, notes, nil
}
