package resolve

import (
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berthdev/berth/qualification"
)

// ParsePlatform parses "os/arch[/variant]" (for example "linux/arm64" or
// "linux/arm/v7"), as a command line flag would give it, into the platform
// to pass to Pin. It is qualification.ParsePlatform restricted to the OS
// and architecture part, so names are normalized by the one alias table
// ("x86_64" is amd64, "aarch64" is arm64, "armv7l" is arm/v7). Errors quote
// s.
func ParsePlatform(s string) (v1.Platform, error) {
	t := strings.TrimSpace(s)
	if t == "" || strings.ContainsAny(t, " \t") {
		return v1.Platform{}, fmt.Errorf("resolve: platform %q: want os/arch[/variant]", s)
	}
	p, err := qualification.ParsePlatform(t)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("resolve: platform %q: want os/arch[/variant]: %w", s, err)
	}
	return v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant}, nil
}
