// Package errtable is the table of provoked failures that berth's tests
// walk through the library (the root package), the API (examples/server)
// and envctl (examples/envctl) (issue 50 item 5): for each failure, how to
// provoke it on which environment, and what both readers must get: the
// code and the reason for a program, one sentence naming the target for a
// person, the chain as the detail. Check says what is wrong with what a
// surface answered. NewFixture starts the real components the rows
// need. Tests only; it imports no berth package but the test harness and
// the fake Daytona API, so each surface provokes the failure with its own
// calls.
package errtable

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Action says how a row's failure is provoked.
type Action int

const (
	// Probe: create Env, probe it for company "acme"; the probe fails.
	Probe Action = iota
	// Create: create Env; the create is refused.
	Create
	// Qualify: create Env and probe it; the probe succeeds, but its
	// qualification diagnostic says why nothing was recorded.
	Qualify
	// Setup: create Env and start a setup session on it (template
	// "tpl"); the start is refused.
	Setup
	// StoppedTerminal: create Env, start a setup session on it, stop it
	// (cancel it, or let it finish), then open its terminal; refused.
	StoppedTerminal
	// Quota: set a lease quota of 1 per company, create Env, acquire a
	// lease of it for company "acme" twice; the second is refused.
	Quota
)

// Env is the environment a row is provoked on.
type Env struct {
	Name   string
	Driver string
	Config map[string]any
}

// Row is one provoked failure and what each reader must get.
type Row struct {
	Name   string
	Action Action
	Env    Env
	// Code is errcode's name of the code ("auth_failed", ...).
	Code string
	// Reason is the reason ("" for none).
	Reason string
	// Target is what the message names.
	Target string
	// InChain is what the detail keeps of the chain.
	InChain string
}

// Fixture is what a test's real components answer at: an sshd
// (internal/testenv.SSHD), a local port nothing listens on, the fake
// Daytona API (internal/daytonafake) with a snapshot, and an image
// tag the fake driver knows.
type Fixture struct {
	SSHHost          string
	SSHPort          int
	SSHUser          string
	ClientKey        string // PEM of a key the sshd accepts
	UnauthorizedKey  string // PEM of a key it refuses
	KnownHosts       string // the sshd's known_hosts line
	MismatchedKnown  string // a line with another key for the sshd's address
	Workdir          string // an existing directory on the sshd's host
	ClosedPort       int
	DaytonaURL       string
	DaytonaKey       string
	DaytonaOrg       string
	DaytonaSnapshot  string // the id of a snapshot of the fake API
	FakeMutableImage string // a tag the fake driver knows, never pinned
	FakeKey          string // the fake driver's api_key
}

// missingSnapshot is a snapshot id the fake Daytona API does not have.
const missingSnapshot = "0b6f3c0e-6d1c-4c8e-9a57-1d2f3e4a5b6c"

// Rows returns the table for f. Environment names are unique within it.
func Rows(f Fixture) []Row {
	addr := f.SSHHost + ":" + strconv.Itoa(f.SSHPort)
	closed := "127.0.0.1:" + strconv.Itoa(f.ClosedPort)
	unknownLine := strings.Replace(f.KnownHosts, f.SSHHost, "192.0.2.7", 1)
	ssh := func(knownHosts, key string, port int) map[string]any {
		return map[string]any{"host": f.SSHHost, "port": port, "user": f.SSHUser,
			"private_key": key, "known_hosts": []any{knownHosts}, "workdir": f.Workdir}
	}
	daytona := func(key, snapshot string) map[string]any {
		return map[string]any{"api_url": f.DaytonaURL, "api_key": key, "organization_id": f.DaytonaOrg, "snapshot_id": snapshot}
	}
	fake := func(extra ...string) map[string]any {
		c := map[string]any{"api_key": f.FakeKey}
		for i := 0; i+1 < len(extra); i += 2 {
			c[extra[i]] = extra[i+1]
		}
		return c
	}
	return []Row{
		{"unknown host key", Probe, Env{"unknown-key", "ssh", ssh(unknownLine, f.ClientKey, f.SSHPort)},
			"auth_failed", "host_key_unknown", addr, "host key unknown"},
		{"mismatched host key", Probe, Env{"impostor", "ssh", ssh(f.MismatchedKnown, f.ClientKey, f.SSHPort)},
			"auth_failed", "host_key_mismatch", addr, "host key mismatch"},
		{"wrong key", Probe, Env{"wrong-key", "ssh", ssh(f.KnownHosts, f.UnauthorizedKey, f.SSHPort)},
			"auth_failed", "auth_failed", addr, "authentication failed"},
		{"unreachable host", Probe, Env{"gone", "ssh", ssh(f.KnownHosts, f.ClientKey, f.ClosedPort)},
			"unreachable", "unreachable", closed, "target unreachable"},
		{"engine down", Probe, Env{"no-engine", "docker", map[string]any{"host": "tcp://" + closed, "image": "debian@sha256:" + strings.Repeat("a", 64)}},
			"unavailable", "provider_unavailable", closed, "provider unavailable"},
		{"Daytona 401", Probe, Env{"bad-key", "daytona", daytona("wrong-key-0123456789", f.DaytonaSnapshot)},
			"auth_failed", "auth_failed", "Daytona", "401"},
		{"Daytona 404 (deleted snapshot)", Probe, Env{"no-snap", "daytona", daytona(f.DaytonaKey, missingSnapshot)},
			"not_found", "image_not_found", missingSnapshot, "404"},
		{"missing credentials", Create, Env{"keyless", "ssh", map[string]any{"host": f.SSHHost, "port": f.SSHPort, "user": f.SSHUser, "known_hosts": []any{f.KnownHosts}}},
			"invalid", "missing_credentials", `"keyless"`, "private_key"},
		{"quota", Quota, Env{"metered", "fake", fake()},
			"unavailable", "quota_exceeded", `"metered"`, "quota reached"},
		{"unsupported capability", Setup, Env{"plain-host", "ssh", ssh(f.KnownHosts, f.ClientKey, f.SSHPort)},
			"unsupported", "unsupported", `"plain-host"`, "lacks capability template_capture"},
		{"mutable image", Qualify, Env{"floating", "fake", fake("image", f.FakeMutableImage)},
			"conflict", "image_not_pinned", f.FakeMutableImage, "floating"},
		{"terminal on a stopped sandbox", StoppedTerminal, Env{"setup-box", "fake", fake()},
			"conflict", "setup_session_not_waiting", `"typed"`, "not waiting_for_user"},
	}
}

var (
	// requirementID and goIdentifier are what a message for a person
	// never holds.
	requirementID = regexp.MustCompile(`(CFG|CAP|PRB|QUAL|IMG|LEASE|ASG|PRP|AUTH|UI|WS|ISO|PLG|SCALE)-[0-9]+`)
	goIdentifier  = regexp.MustCompile(`\b[a-z]+\.[A-Z]\w+`)
)

// Check returns what is wrong with a surface's answer to r: the code and
// reason must be r's; the message one sentence of at most 200 characters
// naming r's target, with no requirement ID and no Go identifier; the
// detail must keep r's part of the chain and not be the message. nil when
// all holds.
func Check(r Row, code, reason, message, detail string) []string {
	var out []string
	if code != r.Code || reason != r.Reason {
		out = append(out, fmt.Sprintf("code %q, reason %q; want %q, %q", code, reason, r.Code, r.Reason))
	}
	out = append(out, CheckMessage(message, r.Target)...)
	if !strings.Contains(detail, r.InChain) || detail == message {
		out = append(out, fmt.Sprintf("detail %q does not keep the chain (%q)", detail, r.InChain))
	}
	return out
}

// CheckMessage returns what is wrong with a message for a person that
// should name target.
func CheckMessage(m, target string) []string {
	switch {
	case m == "" || len([]rune(m)) > 200:
		return []string{fmt.Sprintf("message of %d characters: %q", len([]rune(m)), m)}
	case !strings.Contains(m, target):
		return []string{fmt.Sprintf("message %q does not name %s", m, target)}
	case requirementID.MatchString(m):
		return []string{fmt.Sprintf("message %q holds a requirement ID", m)}
	case goIdentifier.MatchString(m):
		return []string{fmt.Sprintf("message %q holds a Go identifier %q", m, goIdentifier.FindString(m))}
	}
	return nil
}
