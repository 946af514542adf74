package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	berthk8s "github.com/berthdev/berth/drivers/kubernetes"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// A task through berth's runner in a pod, on the real cluster through the
// lease manager: the runner is installed through exec and reaches the
// host's controller over the exec relay (no network path from the pod);
// a task's output streams and its exit status comes back; a long task is
// stopped with the runner's complete proof; the release confirms the pod
// gone, and no pod is left.
func TestRunnerTaskInAPod(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{berthk8s.New(nil)}, RunnerBinary: testenv.RunnerBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	v, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "runner", Driver: "kubernetes", Config: e.raw(nil)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, WithRunner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{})
	task, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", "echo one; echo two >&2; exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(task.Stream(ctx))
	if err != nil || !strings.Contains(string(b), "one\n") || !strings.Contains(string(b), "two\n") {
		t.Errorf("the task's output: %q, %v", b, err)
	}
	if exit, err := task.Wait(ctx); err != nil || exit.Code != 7 {
		t.Errorf("the task's exit: %+v, %v; want code 7", exit, err)
	}
	long, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", "echo started; sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("started\n"))
	if _, err := io.ReadFull(long.Stream(ctx), first); err != nil || string(first) != "started\n" {
		t.Fatalf("the long task's first line: %q, %v", first, err)
	}
	proof, err := long.Stop(ctx)
	if err != nil || !proof.Complete || len(proof.Survivors) != 0 {
		t.Errorf("stop: %+v, %v; want a complete proof with no survivor", proof, err)
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Errorf("release: %+v, %v; want released, confirmed", l, err)
	}
	if left := e.pods(t, ctx); len(left) != 0 {
		t.Errorf("pods left: %v", left)
	}
}

// envctl run on a Kubernetes environment (issue 57 item 3), the real
// envctl binary with the real runner: output byte-exact on stdout and
// stderr apart, the task's exit status as envctl's, and SIGINT (Ctrl-C)
// stops a running task with the runner's complete proof; no pod is left.
func TestEnvctlRunInAPod(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	envctl := filepath.Join(t.TempDir(), "envctl")
	if out, err := testenv.GoBuild(envctl, "github.com/berthdev/berth/examples/envctl"); err != nil {
		t.Fatalf("build envctl: %v\n%s", err, out)
	}
	runner, _ := testenv.RunnerBinarySum(t)
	db := filepath.Join(t.TempDir(), "envctl.db")
	cmd := func(stdin string, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, envctl, append([]string{"--db", db}, args...)...)
		c.Stdin = strings.NewReader(stdin)
		return c
	}
	cfg, _ := json.Marshal(e.raw(nil))
	if out, err := cmd(string(cfg), "env", "create", "--name", "pods", "--driver", "kubernetes", "--config", "-").CombinedOutput(); err != nil {
		t.Fatalf("env create: %v\n%s", err, out)
	}

	var stdout, stderr syncbuf.Buffer
	run := cmd("", "run", "pods", "--company", "acme", "--runner-binary", runner, "--",
		"sh", "-c", `printf 'a\000b\n\377'; printf 'to-stderr' >&2; exit 5`)
	run.Stdout, run.Stderr = &stdout, &stderr
	err := run.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("envctl run: %v, want exit status 5\nstderr:\n%s", err, stderr.String())
	}
	if stdout.String() != "a\x00b\n\xff" {
		t.Errorf("stdout %q, want the task's bytes exactly", stdout.String())
	}
	for _, want := range []string{"to-stderr", "started on the runner", "cleanup confirmed"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	stdout, stderr = syncbuf.Buffer{}, syncbuf.Buffer{}
	run = cmd("", "run", "pods", "--company", "acme", "--runner-binary", runner, "--", "sh", "-c", "echo up; sleep 600")
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(stdout.String(), "up\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the task never printed: stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = run.Wait()
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("envctl run after SIGINT: %v, want exit status 130\nstderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{"stop proof of task", "complete true", "survivors []", "cleanup confirmed"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr after SIGINT lacks %q:\n%s", want, stderr.String())
		}
	}
	if left := e.pods(t, ctx); len(left) != 0 {
		t.Errorf("pods left: %v", left)
	}
	_ = os.Remove(db)
}
