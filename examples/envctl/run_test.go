package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/runnerbin"
)

// fakeRunnerBinary writes a file to stand for the runner binary (an ELF
// header of this host's architecture): the fake driver runs internal/runner
// in-process and never executes it.
func fakeRunnerBinary(t *testing.T) string {
	t.Helper()
	return testenv.FakeRunnerBinary(t)
}

// notifyWriter is a concurrency-safe buffer that closes hit once its
// contents hold want.
type notifyWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	hit  chan struct{}
	once sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.hit) })
	}
	return n, err
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// issue 17: envctl run streams the task's stdout and stderr separately and
// byte-exact, shows progress while the runner installs and connects,
// prints the lease receipt (the runner's proof first) and exits with the
// task's exit code.
func TestRunStreamsOutputAndExitsWithTheTasksCode(t *testing.T) {
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	bin := fakeRunnerBinary(t)
	out, errOut, err := c.exec("", "run", "sbx", "--company", "acme", "--runner-binary", bin, "--",
		"sh", "-c", `printf 'a\000b\n\377'; printf 'to-stderr' >&2; exit 3`)
	var es *exitStatus
	if !errors.As(err, &es) || es.code != 3 || exitCode(err) != 3 {
		t.Fatalf("run = %v, want the task's exit code 3\nstderr:\n%s", err, errOut)
	}
	if out != "a\x00b\n\xff" {
		t.Errorf("stdout = %q, want the task's bytes exactly", out)
	}
	wantContains(t, "stderr", errOut, "to-stderr", "starting the runner (sha256 ", "started on the runner",
		"released, cleanup confirmed by provider (runner (runner_attested): 1 task(s) of 1 runner session(s) stopped, attested by the runner")
	if strings.Contains(out, "envctl:") {
		t.Errorf("progress went to stdout: %q", out)
	}

	// The exit code 0 is an exit without error.
	if out := c.ok("run", "sbx", "--company", "acme", "--runner-binary", bin, "--", "echo", "hello"); out != "hello\n" {
		t.Errorf("stdout = %q, want hello", out)
	}
}

// Ctrl-C stops the task through the runner with a complete proof, leaves
// nothing running and exits 130.
func TestRunCtrlCStopsTheTaskWithProof(t *testing.T) {
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	bin := fakeRunnerBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errW := &notifyWriter{want: "started on the runner", hit: make(chan struct{})}
	var out bytes.Buffer
	g := &globals{stdout: &out, stderr: errW, stdin: strings.NewReader(""), drivers: c.drivers}
	go func() {
		select {
		case <-errW.hit:
			cancel() // what main's signal.NotifyContext does on SIGINT
		case <-time.After(time.Minute):
		}
	}()
	const marker = "31415926"
	err := runWith(ctx, g, []string{"--db", c.db, "--test-mode", "run", "sbx", "--company", "acme", "--runner-binary", bin, "--",
		"sh", "-c", "sleep " + marker + " & sleep " + marker + "; wait"})
	if exitCode(err) != 130 {
		t.Fatalf("run = %v (exit %d), want 130 after Ctrl-C\nstderr:\n%s", err, exitCode(err), errW.String())
	}
	wantContains(t, "stderr", errW.String(), "interrupted: stopping task", "stop proof of task", "attested by the runner (runner_attested): complete true",
		"methods "+prp.MethodGroup+"+"+prp.MethodProcTag, "survivors []",
		"released, cleanup confirmed by provider (runner (runner_attested): 1 task(s) of 1 runner session(s) stopped, attested by the runner", "1 of them by an earlier stop")
	// The runner's proof is its word: nothing the runner reported is
	// called verified (issue 22 item 3).
	if strings.Contains(errW.String(), "verified") {
		t.Errorf("stderr calls a runner's proof verified:\n%s", errW.String())
	}
	if left := processesWith(marker); len(left) > 0 {
		t.Errorf("processes of the task left after Ctrl-C: %v", left)
	}
}

// processesWith returns the pids whose command line contains s.
func processesWith(s string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if i := bytes.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
				continue
			}
			out = append(out, e.Name())
		}
	}
	return out
}

// --json prints the task's stored output, the exit and the receipt as one
// object.
func TestRunJSONPrintsTheOutput(t *testing.T) {
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	var rep struct {
		Lease    string              `json:"lease"`
		Task     string              `json:"task"`
		Runner   string              `json:"runner"`
		Output   []lease.OutputChunk `json:"output"`
		Exit     *lease.Exit         `json:"exit"`
		Receipt  *lease.Lease        `json:"receipt"`
		ExitCode int                 `json:"exitCode"`
	}
	c.okJSON(&rep, "run", "sbx", "--company", "acme", "--runner-binary", fakeRunnerBinary(t), "--", "sh", "-c", "printf x%sy -; printf e >&2")
	var stdout, stderr []byte
	for _, ch := range rep.Output {
		if ch.Stream == "stderr" {
			stderr = append(stderr, ch.Data...)
		} else {
			stdout = append(stdout, ch.Data...)
		}
	}
	if string(stdout) != "x-y" || string(stderr) != "e" || rep.Exit == nil || rep.Exit.Code != 0 || rep.ExitCode != 0 {
		t.Errorf("output %q / %q exit %+v code %d, want x-y / e and 0", stdout, stderr, rep.Exit, rep.ExitCode)
	}
	if len(rep.Runner) != 64 || !strings.HasPrefix(rep.Task, "task_") {
		t.Errorf("runner %q task %q, want the runner's SHA-256 and a task id", rep.Runner, rep.Task)
	}
	if rep.Receipt == nil || rep.Receipt.ID != rep.Lease || rep.Receipt.Cleanup != "confirmed" {
		t.Errorf("receipt %+v, want the confirmed release of lease %s", rep.Receipt, rep.Lease)
	}
}

// issue 25: without a runner binary named, run builds one from the
// module's source for the target's architecture, once, into the user's
// cache (a progress line on stderr), and runs the task with it; a second
// run finds it in the cache and builds nothing.
func TestRunWithoutARunnerFlagBuildsTheRunnerOnce(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	t.Setenv(RunnerBinaryEnv, "")
	c := newCLI(t)
	cache := t.TempDir()
	c.runnerBuild = &runnerbin.Options{CacheDir: cache}
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	out, errOut, err := c.exec("", "run", "sbx", "--company", "acme", "--", "echo", "hi")
	if err != nil || out != "hi\n" {
		t.Fatalf("run = %q, %v; want hi\nstderr:\n%s", out, err, errOut)
	}
	wantContains(t, "stderr", errOut, "envctl: building the runner for linux/"+runtime.GOARCH, cache)
	if i, j := strings.Index(errOut, "building the runner"), strings.Index(errOut, "envctl: lease lse_"); i < 0 || j < 0 || i > j {
		t.Errorf("the build is not reported before the sandbox is allocated:\n%s", errOut)
	}
	bins, _ := filepath.Glob(filepath.Join(cache, "*-linux-"+runtime.GOARCH, "berth-runner"))
	if len(bins) != 1 {
		t.Fatalf("cached runners %v, want one for linux/%s", bins, runtime.GOARCH)
	}
	out, errOut, err = c.exec("", "run", "sbx", "--company", "acme", "--", "echo", "again")
	if err != nil || out != "again\n" {
		t.Fatalf("second run = %q, %v\nstderr:\n%s", out, err, errOut)
	}
	if strings.Contains(errOut, "building the runner") {
		t.Errorf("the second run built the runner again:\n%s", errOut)
	}
	// probe --runner without a flag takes the same way: the cached build.
	out, errOut, err = c.exec("", "probe", "sbx", "--company", "acme", "--runner")
	if err != nil || !strings.Contains(out, "runner") {
		t.Fatalf("probe --runner without a binary = %q, %v\nstderr:\n%s", out, err, errOut)
	}
	if strings.Contains(errOut, "building the runner") {
		t.Errorf("probe --runner built the runner again:\n%s", errOut)
	}
}

// Without a runner binary and without a go command or the module's
// source (a binary install), run says so and how to name a binary, and
// leases nothing.
func TestRunWithoutARunnerBinaryOrAGoCommandSaysHowToNameOne(t *testing.T) {
	t.Setenv(RunnerBinaryEnv, "")
	for _, tc := range []struct {
		name string
		o    runnerbin.Options
		want string
	}{
		{"no go command", runnerbin.Options{Go: "/nonexistent/go"}, "no go command"},
		{"no source", runnerbin.Options{SourceDir: "/nonexistent/src"}, "source is not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			tc.o.CacheDir = t.TempDir()
			c.runnerBuild = &tc.o
			c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
			_, msg := c.fail("run", "sbx", "--company", "acme", "--", "true")
			wantContains(t, "error", msg, "no runner binary", "--runner-binary", RunnerBinaryEnv, runnerBuildHint, tc.want, "for "+runtime.GOARCH)
			if n := len(fakectl.Of(c.fake).Sandboxes()); n != 0 {
				t.Errorf("%d sandboxes made without a runner binary", n)
			}
		})
	}
}

// PRP-8: probe --runner takes the platform from the runner's hello under
// a probe identity and confirms the cleanup.
func TestProbeThroughTheRunner(t *testing.T) {
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	var res struct {
		OK            bool   `json:"ok"`
		RunnerVersion string `json:"runnerVersion"`
		Platform      string `json:"platform"`
		Stages        []struct {
			Name string `json:"name"`
		} `json:"stages"`
	}
	c.okJSON(&res, "probe", "sbx", "--company", "acme", "--runner", "--runner-binary", fakeRunnerBinary(t))
	var names []string
	for _, s := range res.Stages {
		names = append(names, s.Name)
	}
	if !res.OK || res.RunnerVersion == "" || !strings.HasPrefix(res.Platform, "linux/") || !strings.Contains(strings.Join(names, ","), "runner") {
		t.Errorf("probe --runner: ok %t runner %q platform %q stages %v", res.OK, res.RunnerVersion, res.Platform, names)
	}
}

// run --managed-account: flags that cannot work are refused before any
// lease (naming the flag), and a task without a matching project auth
// check is refused with its code after the lease, which is released.
func TestRunManagedAccountFlags(t *testing.T) {
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	bin := fakeRunnerBinary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "sbx", "--company", "acme", "--account-file", "/tmp/a", "--", "true"}, "--account-file needs --managed-account"},
		{[]string{"run", "sbx", "--company", "acme", "--project", "p1", "--", "true"}, "it needs --managed-account"},
		{[]string{"run", "--company", "acme", "--project", "p1", "--project", "p2", "--managed-account", "secret:s@v1", "--", "true"}, "a scope has one project"},
		{[]string{"run", "sbx", "--company", "acme", "--managed-account", "acct-1", "--", "true"}, "account_ref"},
		{[]string{"run", "sbx", "--company", "acme", "--managed-account", "secret:s@v1", "--account-file", "a/../b", "--", "true"}, "not a clean file path"},
	} {
		_, msg := c.fail(append(tc.args[:1:1], append([]string{"--runner-binary", bin}, tc.args[1:]...)...)...)
		wantContains(t, strings.Join(tc.args, " "), msg, tc.want)
	}
	if n := len(fakectl.Of(c.fake).Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes made for refused flags", n)
	}
	_, errOut, err := c.exec("", "run", "sbx", "--company", "acme", "--runner-binary", bin, "--managed-account", "secret:sec_none@v1", "--", "true")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "refused (auth_check_missing)") {
		t.Errorf("run without a project auth check = %v (exit %d), want exit 1 naming auth_check_missing", err, exitCode(err))
	}
	wantContains(t, "stderr", errOut, "cleanup confirmed")
}

// A runner that cannot start ends run at --connect-timeout with what the
// runner wrote (its log's tail), and the lease is released: envctl never
// waits forever for a hello.
func TestRunConnectTimeoutShowsTheRunnersLog(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	c.ok("env", "create", "--name", "here", "--driver", "local", "--config", writeFile(t, `{"workdir":"`+dir+`"}`))
	// A "runner" that says why it cannot run and exits.
	bin := filepath.Join(t.TempDir(), "not-a-runner")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'not-a-runner: cannot start on this host' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, msg := c.fail("run", "here", "--company", "acme", "--runner-binary", bin, "--connect-timeout", "3s", "--", "true")
	wantContains(t, "error", msg, "no hello from the runner", "not-a-runner: cannot start on this host")
	if out := c.ok("lease", "list", "--status", "active"); strings.Contains(out, "here") {
		t.Errorf("a lease is still active after the failed run:\n%s", out)
	}
}
