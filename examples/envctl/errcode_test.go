package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/internal/errtable"
	"github.com/berthdev/berth/internal/qualify"
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

// Provoked failures through envctl (issue 50 item 5): the rows of
// internal/errtable (shared with the library's TestFailuresSpeakToPeople
// and the API's TestErrorShapeTable) against a real sshd, the Docker client
// against a closed port and the fake Daytona API, plus envctl's own rows.
// Each line is one sentence of at most 200 characters naming the target,
// without requirement IDs or Go identifiers, with the code and the reason;
// the detail (--verbose) keeps the chain, and --json carries both readers.
func TestErrorLinesSpeakToPeople(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
	envctl := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := envctlProcess(ctx, append([]string{"--db", db, "--test-mode"}, args...)...).Output()
		if err != nil {
			var ee *exec.ExitError
			errors.As(err, &ee)
			t.Fatalf("envctl %v: %v\n%s%s", args, err, out, ee.Stderr)
		}
		return string(out)
	}
	fx := errtable.NewFixture(t, fake.DefaultImage, "k-0123456789")
	create := func(t *testing.T, e errtable.Env) string {
		t.Helper()
		b, err := json.Marshal(e.Config)
		if err != nil {
			t.Fatal(err)
		}
		envctl(t, "env", "create", "--name", e.Name, "--driver", e.Driver, "--config", write(e.Name+".json", string(b)))
		return e.Name
	}
	// args provokes r's failure up to its last command, whose arguments
	// it returns.
	args := func(t *testing.T, r errtable.Row) []string {
		switch r.Action {
		case errtable.Probe, errtable.Qualify:
			return []string{"--test-mode", "probe", create(t, r.Env), "--company", "acme"}
		case errtable.Create:
			b, err := json.Marshal(r.Env.Config)
			if err != nil {
				t.Fatal(err)
			}
			return []string{"--test-mode", "env", "create", "--name", r.Env.Name, "--driver", r.Env.Driver, "--config", write(r.Env.Name+".json", string(b))}
		case errtable.Setup:
			return []string{"--test-mode", "image", "setup", create(t, r.Env), "--name", "tpl", "--script", write("steps.json", `{"steps":[{"run":["true"]}]}`)}
		case errtable.StoppedTerminal:
			// An interactive setup whose terminal reads nothing (stdin is
			// empty): the shell exits, the session is cancelled.
			out := envctl(t, "image", "setup", create(t, r.Env), "--name", "typed", "--interactive")
			_, after, ok := strings.Cut(out, "setup session ")
			f := strings.Fields(after)
			if !ok || len(f) == 0 || !strings.Contains(after, ": cancelled") {
				t.Fatalf("image setup printed %q", out)
			}
			return []string{"--test-mode", "image", "terminal", f[0]}
		case errtable.Quota:
			envctl(t, "settings", "set", "--quota-per-company", "1")
			name := create(t, r.Env)
			envctl(t, "lease", "acquire", name, "--company", "acme", "--run", "r1")
			return []string{"--test-mode", "lease", "acquire", name, "--company", "acme", "--run", "r2"}
		}
		t.Fatalf("row %q: action %d is not provoked here", r.Name, r.Action)
		return nil
	}
	if out, err := envctlProcess(ctx, "--db", db, "--test-mode", "env", "create", "--name", "box", "--driver", "fake", "--config", write("fake.json", `{}`)).CombinedOutput(); err != nil {
		t.Fatalf("create box: %v\n%s", err, out)
	}
	keyless := write("keyless.json", `{"host":"127.0.0.1","port":2222,"user":"root","known_hosts":["[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"]}`)
	type row struct {
		row  errtable.Row
		args func(t *testing.T) []string
	}
	rows := []row{
		{errtable.Row{Name: "not found", Code: "not_found", Target: `"env_nope"`, InChain: "not found"},
			func(*testing.T) []string { return []string{"env", "show", "env_nope"} }},
		{errtable.Row{Name: "missing credentials (envctl)", Code: "invalid", Reason: "missing_credentials", Target: `"keyless"`, InChain: `field "private_key": required`},
			func(*testing.T) []string {
				return []string{"env", "create", "--name", "keyless", "--driver", "ssh", "--config", keyless}
			}},
		{errtable.Row{Name: "stale revision", Code: "conflict", Reason: "stale_revision", Target: `"box"`, InChain: "stale revision 9"},
			func(*testing.T) []string {
				return []string{"--test-mode", "env", "update", "box", "--revision", "9", "--description", "d"}
			}},
		{errtable.Row{Name: "denied", Code: "denied", Target: `"box"`, InChain: "permission denied"},
			func(*testing.T) []string {
				return []string{"--as", "agent:a1@acme", "--test-mode", "env", "archive", "box"}
			}},
	}
	// The quota's row comes last: its live lease and quota of 1 would
	// refuse the probes of the rows after it.
	shared := errtable.Rows(fx)
	sort.SliceStable(shared, func(i, j int) bool { return shared[i].Action != errtable.Quota && shared[j].Action == errtable.Quota })
	for _, r := range shared {
		rows = append(rows, row{r, func(t *testing.T) []string { return args(t, r) }})
	}
	for _, tc := range rows {
		t.Run(tc.row.Name, func(t *testing.T) {
			args := tc.args(t)
			run := func(flags ...string) string {
				var stderr strings.Builder
				cmd := envctlProcess(ctx, append(append([]string{"--db", db}, flags...), args...)...)
				cmd.Stderr = &stderr
				var ee *exec.ExitError
				if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
					t.Fatalf("envctl %v: %v, want exit status 1; stderr %q", args, err, stderr.String())
				}
				return stderr.String()
			}
			if tc.row.Action == errtable.Qualify {
				// The probe succeeds; its diagnostic is in the JSON result.
				out, err := envctlProcess(ctx, append([]string{"--db", db, "--json"}, args...)...).Output()
				var res probejson.Result
				if err != nil || json.Unmarshal(out, &res) != nil || !res.OK || res.QualificationDiagnostic == nil {
					t.Fatalf("envctl --json %v: %v\n%s", args, err, out)
				}
				d := res.QualificationDiagnostic
				for _, p := range errtable.Check(tc.row, qualify.ErrorCode(d.Code).String(), d.Code, d.Message, res.Summary) {
					t.Error(p)
				}
				return
			}
			// The last line: progress lines (a probe's stages) come first.
			all := strings.TrimSuffix(run(), "\n")
			line := all[strings.LastIndex(all, "\n")+1:]
			want := " (code " + tc.row.Code
			if tc.row.Reason != "" {
				want += ", reason " + tc.row.Reason
			}
			want += ")"
			msg, ok := strings.CutSuffix(strings.TrimPrefix(line, "envctl: "), want)
			if !ok {
				t.Errorf("line %q does not end in %q", line, want)
			}
			for _, p := range errtable.CheckMessage(msg, tc.row.Target) {
				t.Error(p)
			}
			verbose := run("--verbose")
			if !strings.Contains(verbose, line+"\ndetail: ") || !strings.Contains(verbose[strings.Index(verbose, line):], tc.row.InChain) {
				t.Errorf("--verbose: %q; want the line, then the detail keeping %q", verbose, tc.row.InChain)
			}
			var shape struct {
				Error struct{ Code, Reason, Message, Detail string }
			}
			js := run("--json")
			if err := json.Unmarshal([]byte(js), &shape); err != nil {
				t.Fatalf("--json: %q: %v", js, err)
			}
			for _, p := range errtable.Check(tc.row, shape.Error.Code, shape.Error.Reason, shape.Error.Message, shape.Error.Detail) {
				t.Errorf("--json: %s", p)
			}
			if shape.Error.Message != msg {
				t.Errorf("--json message %q, the line's %q", shape.Error.Message, msg)
			}
			t.Logf("%s", line)
		})
	}
}
