package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
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
