package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A failed command prints the sentence for a person with berth's code
// (issue 50), the detail with --verbose and the error shape with --json;
// an error berth did not classify prints as before.
func TestErrorLineGainsTheCode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "envctl.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", db, "env", "show", "env_nope"}, "envctl: Could not find environment \"env_nope\": check the name or id with 'envctl env list'. (code not_found)\n"},
		{[]string{"--db", db, "--as", "agent:a1@acme", "lease", "release", "l_nope"},
			"envctl: Could not find lease l_nope: it does not exist or you may not see it. (code not_found)\n"},
		{[]string{"--db", db, "--verbose", "env", "show", "env_nope"},
			"envctl: Could not find environment \"env_nope\": check the name or id with 'envctl env list'. (code not_found)\ndetail: environment \"env_nope\": not found\n"},
		{[]string{"--db", db, "--json", "env", "show", "env_nope"},
			`{"error":{"code":"not_found","detail":"environment \"env_nope\": not found","field":"","message":"Could not find environment \"env_nope\": check the name or id with 'envctl env list'.","reason":"","target":"environment \"env_nope\""}}` + "\n"},
	} {
		var stderr strings.Builder
		cmd := envctlProcess(ctx, tc.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("envctl %v: %v, want exit status 1", tc.args, err)
		}
		if stderr.String() != tc.want {
			t.Errorf("envctl %v: stderr %q, want %q", tc.args, stderr.String(), tc.want)
		}
	}
	if got := errorLine(errors.New("flag provided but not defined: -x")); got != "envctl: flag provided but not defined: -x" {
		t.Errorf("an unclassified error prints as %q", got)
	}
}

// Provoked failures through envctl (issue 50 item 5; the library's rows
// are the root package's TestFailuresSpeakToPeople): each line is one
// sentence of at most 200 characters naming the target, without
// requirement IDs or Go identifiers, with the code and the reason; the
// detail (--verbose) keeps the chain, and --json carries both readers.
func TestErrorLinesSpeakToPeople(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	db := filepath.Join(dir, "envctl.db")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyless := write("keyless.json", `{"host":"127.0.0.1","port":2222,"user":"root","known_hosts":["[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"]}`)
	if out, err := envctlProcess(ctx, "--db", db, "--test-mode", "env", "create", "--name", "box", "--driver", "fake", "--config", write("fake.json", `{}`)).CombinedOutput(); err != nil {
		t.Fatalf("create box: %v\n%s", err, out)
	}
	requirementID := regexp.MustCompile(`(CFG|CAP|PRB|QUAL|IMG|LEASE|ASG|PRP|AUTH|UI|WS|ISO|PLG|SCALE)-[0-9]+`)
	goIdentifier := regexp.MustCompile(`\b[a-z]+\.[A-Z]\w+`)
	for _, tc := range []struct {
		name    string
		args    []string
		code    string
		reason  string
		target  string
		inChain string
	}{
		{"not found", []string{"env", "show", "env_nope"}, "not_found", "", `"env_nope"`, "not found"},
		{"missing credentials", []string{"env", "create", "--name", "keyless", "--driver", "ssh", "--config", keyless}, "invalid", "missing_credentials", `"keyless"`, `field "private_key": required`},
		{"stale revision", []string{"--test-mode", "env", "update", "box", "--revision", "9", "--description", "d"}, "conflict", "stale_revision", `"box"`, "stale revision 9"},
		{"denied", []string{"--as", "agent:a1@acme", "--test-mode", "env", "archive", "box"}, "denied", "", `"box"`, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(flags ...string) string {
				var stderr strings.Builder
				cmd := envctlProcess(ctx, append(append([]string{"--db", db}, flags...), tc.args...)...)
				cmd.Stderr = &stderr
				var ee *exec.ExitError
				if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
					t.Fatalf("envctl %v: %v, want exit status 1; stderr %q", tc.args, err, stderr.String())
				}
				return stderr.String()
			}
			line := strings.TrimSuffix(run(), "\n")
			want := " (code " + tc.code
			if tc.reason != "" {
				want += ", reason " + tc.reason
			}
			want += ")"
			msg, ok := strings.CutSuffix(strings.TrimPrefix(line, "envctl: "), want)
			switch {
			case !ok || strings.Contains(line, "\n"):
				t.Errorf("line %q does not end in %q", line, want)
			case len([]rune(msg)) > 200 || !strings.Contains(msg, tc.target):
				t.Errorf("message %q: longer than 200 characters or not naming %s", msg, tc.target)
			case requirementID.MatchString(msg), goIdentifier.MatchString(msg):
				t.Errorf("message %q holds a requirement ID or a Go identifier", msg)
			}
			verbose := run("--verbose")
			if !strings.HasPrefix(verbose, line+"\ndetail: ") || !strings.Contains(verbose, tc.inChain) {
				t.Errorf("--verbose: %q; want the line, then the detail keeping %q", verbose, tc.inChain)
			}
			var shape struct {
				Error struct{ Code, Reason, Message, Detail string }
			}
			if err := json.Unmarshal([]byte(run("--json")), &shape); err != nil || shape.Error.Code != tc.code || shape.Error.Reason != tc.reason ||
				shape.Error.Message != msg || !strings.Contains(shape.Error.Detail, tc.inChain) {
				t.Errorf("--json: %+v, %v", shape, err)
			}
		})
	}
}
