package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/kubernetes"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/runnerbin"
)

// cli runs envctl commands in-process against one SQLite file, with one fake
// driver shared by every command, as a provider outlives the CLI process.
type cli struct {
	t       *testing.T
	db      string
	fake    *fake.Driver
	drivers []drivers.Driver
	// runnerBuild, when not nil, is globals.runnerBuild of every command.
	runnerBuild *runnerbin.Options
	// all collects every output, to check that no secret was printed.
	all strings.Builder
}

// newCLI returns a cli over a fresh SQLite file with the drivers envctl
// registers: the Daytona driver polls fast, and the fake is shared.
func newCLI(t *testing.T) *cli {
	t.Helper()
	c := &cli{t: t, db: filepath.Join(t.TempDir(), "envctl.db"), fake: fake.New(nil)}
	dock := docker.New(nil)
	t.Cleanup(func() { _ = dock.Close() })
	c.drivers = []drivers.Driver{local.New(nil), ssh.New(nil), dock, daytona.New(&daytona.Options{
		PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond,
	}), kubernetes.New(nil), c.fake}
	if len(c.drivers) != len(registeredDrivers()) {
		t.Fatalf("the test drivers do not mirror registeredDrivers()")
	}
	return c
}

func (c *cli) exec(stdin string, args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	var out, errb bytes.Buffer
	g := &globals{stdout: &out, stderr: &errb, stdin: strings.NewReader(stdin),
		drivers: c.drivers, runnerBuild: c.runnerBuild}
	err = runWith(context.Background(), g, append([]string{"--db", c.db, "--test-mode"}, args...))
	c.all.WriteString(out.String() + errb.String())
	return out.String(), errb.String(), err
}

// ok runs a command that must succeed and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	out, errOut, err := c.exec("", args...)
	if err != nil {
		c.t.Fatalf("envctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// fail runs a command that must fail and returns its stdout and error text.
func (c *cli) fail(args ...string) (string, string) {
	c.t.Helper()
	out, _, err := c.exec("", args...)
	if err == nil {
		c.t.Fatalf("envctl %s: want an error, got none\n%s", strings.Join(args, " "), out)
	}
	return out, err.Error()
}

// okJSON runs a command with --json and decodes its stdout into v.
func (c *cli) okJSON(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("envctl --json %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// createFake saves a fake environment with cfg (a JSON object) and returns
// its id.
func (c *cli) createFake(name, cfg string) string {
	c.t.Helper()
	out, errOut, err := c.exec(cfg, "--json", "env", "create", "--name", name, "--driver", "fake", "--config", "-")
	if err != nil {
		c.t.Fatalf("env create %s: %v\n%s%s", name, err, out, errOut)
	}
	var v struct{ ID string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ID == "" {
		c.t.Fatalf("env create %s: %v\n%s", name, err, out)
	}
	return v.ID
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// writeFile writes content to a new file in a temporary directory and
// returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
