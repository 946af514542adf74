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

// A failed command's error line gains berth's code (issue 24 item 3); an
// error berth did not classify prints as before.
func TestErrorLineGainsTheCode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "envctl.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", db, "env", "show", "env_nope"}, "envctl: environment \"env_nope\": not found (code not_found)\n"},
		{[]string{"--db", db, "--as", "agent:a1@acme", "lease", "release", "l_nope"}, "envctl: lease l_nope: not found (code not_found)\n"},
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
