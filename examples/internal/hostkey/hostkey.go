// Package hostkey is the "trust a host key" fix-it action that envctl
// (env trust-host-key) and the example server (the page's Trust host key)
// share: scan the key an SSH environment's server offers
// (drivers/ssh.ScanHostKey), show its fingerprint, and, once the operator
// confirmed that fingerprint, scan again and save the key in the
// environment's known_hosts through the catalog's Update (so the library's
// authorization, revision check and validation apply as to any edit).
package hostkey

import (
	"context"
	"fmt"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// Scanned is a scanned host key: the address scanned, the known_hosts line
// for the key and its SHA256 fingerprint, and whether the environment
// already trusts that line.
type Scanned struct {
	Host           string `json:"host"`
	Port           int    `json:"port"`
	Fingerprint    string `json:"fingerprint"`
	KnownHostsLine string `json:"knownHostsLine"`
	Trusted        bool   `json:"trusted"`
}

// Scan scans the host key the server of ssh environment v offers. v must
// be the full view (its config); another driver's environment is refused
// with an error wrapping errcode.ErrInvalid.
func Scan(ctx context.Context, v *environment.View) (Scanned, error) {
	host, port, err := address(v)
	if err != nil {
		return Scanned{}, err
	}
	line, fp, err := ssh.ScanHostKey(ctx, host, port)
	if err != nil {
		return Scanned{}, &errcode.Error{Op: "scan host key", Target: fmt.Sprintf("%s:%d", host, port),
			Message: fmt.Sprintf("Could not read the host key of %s:%d; check that the host is up and sshd listens on that port.", host, port), Err: err}
	}
	return Scanned{Host: host, Port: port, Fingerprint: fp, KnownHostsLine: line, Trusted: trusted(v, line)}, nil
}

// Trust scans the key again and, when its fingerprint is the one the
// operator confirmed, saves it in the known_hosts of environment v at v's
// revision (replacing the lines for the same address, so that a changed
// key replaces the old one). A different fingerprint is refused with an
// error wrapping errcode.ErrConflict and nothing is saved: the key
// changed after the operator saw it.
func Trust(ctx context.Context, cat *environment.Catalog, p authz.Principal, v *environment.View, fingerprint string) (*environment.View, Scanned, error) {
	sc, err := Scan(ctx, v)
	if err != nil {
		return nil, Scanned{}, err
	}
	if fingerprint == "" || sc.Fingerprint != strings.TrimSpace(fingerprint) {
		return nil, sc, &errcode.Error{Code: errcode.Conflict, Op: "trust host key", Target: fmt.Sprintf("%s:%d", sc.Host, sc.Port), Field: "known_hosts",
			Message: fmt.Sprintf("The host %s:%d now offers the key %s, not the one confirmed (%s); scan again and compare before you trust it.", sc.Host, sc.Port, sc.Fingerprint, fingerprint),
			Err:     fmt.Errorf("the host now offers the key %s, not the one confirmed (%q); scan again: %w", sc.Fingerprint, fingerprint, errcode.ErrConflict)}
	}
	if sc.Trusted {
		return v, sc, nil
	}
	cfg := make(map[string]any, len(v.Config))
	for k, val := range v.Config {
		cfg[k] = val
	}
	marker, _, _ := strings.Cut(sc.KnownHostsLine, " ")
	lines := []any{}
	for _, l := range knownHosts(v) {
		if first, _, _ := strings.Cut(l, " "); first != marker {
			lines = append(lines, l)
		}
	}
	cfg["known_hosts"] = append(lines, sc.KnownHostsLine)
	nv, err := cat.Update(ctx, p, v.ID, environment.UpdateRequest{BaseRevision: v.Revision, Config: cfg})
	if err != nil {
		return nil, sc, err
	}
	return nv, sc, nil
}

// address is the host and port of ssh environment v's config.
func address(v *environment.View) (string, int, error) {
	if v.Driver != "ssh" {
		return "", 0, &errcode.Error{Op: "scan host key", Target: fmt.Sprintf("environment %q", v.Name),
			Message: fmt.Sprintf("Environment %q uses the %s driver, which has no host key to trust; only an SSH environment has one.", v.Name, v.Driver),
			Err:     fmt.Errorf("driver %s has no host key to trust: %w", v.Driver, errcode.ErrInvalid)}
	}
	if v.Redacted || v.Config == nil {
		return "", 0, &errcode.Error{Op: "scan host key", Target: fmt.Sprintf("environment %q", v.Name),
			Message: fmt.Sprintf("The configuration of environment %q is not visible to you, so its host cannot be scanned.", v.Name),
			Err:     fmt.Errorf("the configuration is not visible: %w", errcode.ErrDenied)}
	}
	host, _ := v.Config["host"].(string)
	port := 22
	switch n := v.Config["port"].(type) {
	case int64:
		port = int(n)
	case int:
		port = n
	case float64:
		port = int(n)
	}
	return host, port, nil
}

func knownHosts(v *environment.View) []string {
	var out []string
	switch l := v.Config["known_hosts"].(type) {
	case []string:
		out = l
	case []any:
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func trusted(v *environment.View, line string) bool {
	for _, l := range knownHosts(v) {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}
