package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/testenv"
)

func runCLI(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

// TestDemo: the main job runs end to end on the embedded default, every
// release is confirmed, and the pasted secret is never printed.
func TestDemo(t *testing.T) {
	out, errOut, err := runCLI(t, "", "demo")
	if err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, want := range []string{
		"saved environment \"this-host\"",
		"saved environment \"fake-sandbox\"",
		"the config keeps only secret:",
		"a second local environment is refused",
		"(redacted view: config, env vars and metadata are not shown)",
		"may not create",
		"2 leases released, 2 with provider-confirmed cleanup",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, "demo-api-key-0d5e9b") {
		t.Errorf("demo printed the pasted secret")
	}
}

// TestEnvLifecycle drives env create/list/show/update/archive/delete on a
// SQLite file, as an operator and as a board member (CFG-2, CFG-3, CFG-6).
func TestEnvLifecycle(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "envctl.db")
	const canary = "CANARY-envctl-91c4"
	cfg := filepath.Join(dir, "fake.json")
	if err := os.WriteFile(cfg, []byte(`{"api_key":"`+canary+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	must := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, "", append([]string{"--db", db}, args...)...)
		all.WriteString(out + errOut)
		if err != nil {
			t.Fatalf("envctl %v: %v\n%s%s", args, err, out, errOut)
		}
		return out
	}
	fail := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, "", append([]string{"--db", db}, args...)...)
		all.WriteString(out + errOut)
		if err == nil {
			t.Fatalf("envctl %v: want an error, got none\n%s", args, out)
		}
		return err.Error()
	}

	must("--test-mode", "env", "create", "--name", "sbx", "--driver", "fake", "--config", cfg, "--env", "GREETING=hi")
	if msg := fail("env", "create", "--name", "sbx2", "--driver", "fake"); !strings.Contains(msg, "test mode") {
		t.Errorf("fake without test mode: %s", msg)
	}
	if out := must("env", "list"); !strings.Contains(out, "sbx") {
		t.Errorf("list lacks sbx:\n%s", out)
	}
	if out := must("--test-mode", "env", "show", "sbx", "--json"); !strings.Contains(out, `"$secret"`) {
		t.Errorf("admin view lacks the secret reference:\n%s", out)
	}
	if out := must("--as", "board_member:bob", "env", "show", "sbx"); !strings.Contains(out, "redacted view") || strings.Contains(out, "GREETING") {
		t.Errorf("board member view is not redacted:\n%s", out)
	}
	if msg := fail("--as", "agent:a1", "env", "archive", "sbx"); !strings.Contains(msg, "permission denied") {
		t.Errorf("agent archive: %s", msg)
	}
	if msg := fail("--test-mode", "env", "update", "sbx", "--revision", "7", "--description", "x"); !strings.Contains(msg, "stale revision") {
		t.Errorf("stale update: %s", msg)
	}
	if out := must("--test-mode", "env", "update", "sbx", "--revision", "1", "--description", "updated"); !strings.Contains(out, "revision 2") {
		t.Errorf("update did not bump the revision:\n%s", out)
	}
	if out := must("--test-mode", "env", "archive", "sbx"); !strings.Contains(out, "archived") {
		t.Errorf("archive:\n%s", out)
	}
	if out := must("--test-mode", "env", "delete", "sbx"); !strings.Contains(out, "--yes") {
		t.Errorf("delete without --yes must show the blast radius and stop:\n%s", out)
	}
	must("--test-mode", "env", "delete", "sbx", "--yes")
	if out := must("env", "list", "--json"); strings.Contains(out, "sbx") {
		t.Errorf("sbx still listed after delete:\n%s", out)
	}
	if strings.Contains(all.String(), canary) {
		t.Errorf("the pasted secret was printed")
	}
	files, err := filepath.Glob(db + "*") // the database, its WAL, the sealed secrets, the key
	if err != nil || len(files) < 3 {
		t.Fatalf("database files: %v %v", files, err)
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.IsDir() { // PATH.runners, the runners' output
			testenv.CanaryInFiles(t, canary, "the pasted secret", f)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s holds the secret in clear text", filepath.Base(f))
		}
	}
}

// TestEnvJSONBody (CFG-5): `env create --json-body` and `env update
// --json-body` take the whole request shape, so reserved top-level fields,
// reserved config members and imitating metadata keys are refused by name
// through the CLI, and nothing is saved.
func TestEnvJSONBody(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "envctl.db")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, body, field string }{
		{"top-level", `{"name":"x","driver":"local","platformQualificationRecorded":true}`, `field "platformQualificationRecorded"`},
		{"in config", `{"name":"x","driver":"local","config":{"qualified":true}}`, `field "config.qualified"`},
		{"in metadata", `{"name":"x","driver":"local","metadata":{"Qualified":"yes"}}`, `field "metadata.Qualified"`},
	} {
		_, _, err := runCLI(t, "", "--db", db, "env", "create", "--json-body", write(tc.name+".json", tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("%s: err = %v, want reserved %s", tc.name, err, tc.field)
		}
	}
	if _, _, err := runCLI(t, "", "--db", db, "env", "create", "--json-body", "-", "--name", "y"); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Errorf("--json-body with --name: err = %v, want a refusal naming --name", err)
	}
	if out, _, _ := runCLI(t, "", "--db", db, "env", "list"); strings.Contains(out, "local") {
		t.Fatalf("a refused request saved something:\n%s", out)
	}
	out, errOut, err := runCLI(t, `{"name":"here","driver":"local","description":"from a body"}`, "--db", db, "env", "create", "--json-body", "-")
	if err != nil || !strings.Contains(out, "here") {
		t.Fatalf("create from body: %v\n%s%s", err, out, errOut)
	}
	_, _, err = runCLI(t, `{"baseRevision":1,"qualification":{}}`, "--db", db, "env", "update", "here", "--json-body", "-")
	if err == nil || !strings.Contains(err.Error(), `field "qualification"`) {
		t.Errorf("update with a reserved field: err = %v", err)
	}
	out, errOut, err = runCLI(t, `{"baseRevision":1,"description":"changed"}`, "--db", db, "env", "update", "here", "--json-body", "-")
	if err != nil || !strings.Contains(out, "revision 2") {
		t.Fatalf("update from body: %v\n%s%s", err, out, errOut)
	}
}
