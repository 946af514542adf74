package fake

import (
	"cmp"
	"fmt"
	"strings"
)

// Platform is the operating system profile a fake sandbox reports through
// its built-in commands and the detection script. A zero field is not
// reported; see the presets PlatformDebian12, PlatformAlpine and
// PlatformBusybox.
type Platform struct {
	OS      string // the kernel name as Go spells it ("linux"); uname -s prints "Linux"
	Machine string // uname -m ("x86_64", "aarch64")
	Kernel  string // uname -r ("6.1.0-18-amd64")
	// LibcFamily is "glibc", "musl" or "" (no C library: ldd is not found).
	LibcFamily  string
	LibcVersion string // "2.36", "1.2.4"
	// LibcBuild is the distribution's glibc package version shown by
	// ldd --version ("2.36-9+deb12u4"); "" means LibcVersion.
	LibcBuild string
	// OSReleaseID and OSReleaseVersionID are ID and VERSION_ID of
	// /etc/os-release ("debian", "12"). An empty OSReleaseID means the
	// sandbox has no /etc/os-release.
	OSReleaseID        string
	OSReleaseVersionID string
	// PrettyName is PRETTY_NAME of /etc/os-release; "" derives it.
	PrettyName string
	// Hostname is what uname -n prints; "" means the provider lease id.
	Hostname string
}

// PlatformDebian12 returns the default profile: Debian 12 on x86_64 with
// glibc 2.36.
func PlatformDebian12() Platform {
	return Platform{OS: "linux", Machine: "x86_64", Kernel: "6.1.0-18-amd64", LibcFamily: "glibc", LibcVersion: "2.36",
		LibcBuild: "2.36-9+deb12u4", OSReleaseID: "debian", OSReleaseVersionID: "12", PrettyName: "Debian GNU/Linux 12 (bookworm)"}
}

// PlatformAlpine returns an Alpine 3.19 profile on x86_64 with musl 1.2.4.
func PlatformAlpine() Platform {
	return Platform{OS: "linux", Machine: "x86_64", Kernel: "6.1.0-18-amd64", LibcFamily: "musl", LibcVersion: "1.2.4",
		OSReleaseID: "alpine", OSReleaseVersionID: "3.19.1", PrettyName: "Alpine Linux v3.19"}
}

// PlatformBusybox returns a static busybox profile on x86_64: no C library
// (ldd is not found) and no /etc/os-release.
func PlatformBusybox() Platform {
	return Platform{OS: "linux", Machine: "x86_64", Kernel: "6.1.0-18-amd64"}
}

func (p Platform) unameS() string { return title(cmp.Or(p.OS, "linux")) }

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// lddVersion returns what "ldd --version" prints (on stdout or stderr).
func (p Platform) lddVersion() string {
	switch p.LibcFamily {
	case "glibc":
		distro := "GNU libc"
		if p.OSReleaseID != "" {
			distro = title(p.OSReleaseID) + " GLIBC"
		}
		return fmt.Sprintf("ldd (%s %s) %s\nCopyright (C) 2022 Free Software Foundation, Inc.\n"+
			"This is free software; see the source for copying conditions.  There is NO\n"+
			"warranty; not even for MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.\n"+
			"Written by Roland McGrath and Ulrich Drepper.\n", distro, cmp.Or(p.LibcBuild, p.LibcVersion), p.LibcVersion)
	case "musl":
		return fmt.Sprintf("musl libc (%s)\nVersion %s\nDynamic Program Path: /lib/ld-musl-%s.so.1\n"+
			"Usage: ldd [options] [--] pathname\n", p.Machine, p.LibcVersion, p.Machine)
	}
	return "sh: ldd: not found\n"
}

// osRelease returns the content of /etc/os-release, "" when there is none.
func (p Platform) osRelease() string {
	if p.OSReleaseID == "" {
		return ""
	}
	s := fmt.Sprintf("PRETTY_NAME=%q\nNAME=%q\n", cmp.Or(p.PrettyName, strings.TrimSpace(p.OSReleaseID+" "+p.OSReleaseVersionID)), title(p.OSReleaseID))
	if p.OSReleaseVersionID != "" {
		s += fmt.Sprintf("VERSION_ID=%q\n", p.OSReleaseVersionID)
	}
	return s + "ID=" + p.OSReleaseID + "\n"
}
