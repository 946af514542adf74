package resolve

import (
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// archAliases maps machine names (uname -m) to OCI architecture names.
var archAliases = map[string]string{"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64"}

// ParsePlatform parses "os/arch[/variant]" (for example "linux/arm64" or
// "linux/arm/v7"), as a command line flag would give it, into the platform
// to pass to Pin. Machine names are normalized ("x86_64" is amd64,
// "aarch64" is arm64). Errors quote s.
func ParsePlatform(s string) (v1.Platform, error) {
	p, err := v1.ParsePlatform(strings.ToLower(strings.TrimSpace(s)))
	if err != nil {
		return v1.Platform{}, fmt.Errorf("resolve: platform %q: %v", s, err)
	}
	if p.OS == "" || p.Architecture == "" || strings.Contains(p.OS, " ") {
		return v1.Platform{}, fmt.Errorf("resolve: platform %q: want os/arch[/variant]", s)
	}
	if a, ok := archAliases[p.Architecture]; ok {
		p.Architecture = a
	}
	return *p, nil
}
