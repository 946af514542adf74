package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
)

// Issue 30: kill -9 of `envctl image setup` in the middle of a step (a
// real Docker container running it), then `envctl lease sweep` once the
// session's TTL passed: no container of the session is left, and the
// session is timed_out. While envctl lived, its heartbeat kept the short
// TTL from ending the session under a concurrent sweep.
func TestSetupKilledThenSweptOnDocker(t *testing.T) {
	c := newCLI(t)
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	dcfg, _ := json.Marshal(map[string]any{"image": img.Ref, "network": "none", "labels": map[string]string{"test.berth/run": run}})
	c.createEnv("box", "docker", string(dcfg))
	script := filepath.Join(t.TempDir(), "slow.json")
	if err := os.WriteFile(script, []byte(`{"steps": [{"run": ["sh", "-c", "touch /step-started; sleep 600"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	proc := envctlProcess(ctx, "--db", c.db, "image", "setup", "box", "--script", script, "--ttl", "3s")
	var stderr lockedBuffer
	proc.Stderr = &stderr
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	containers := func() []container.Summary {
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "test.berth/run="+run))})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	for !strings.Contains(stderr.String(), "step 1/1") {
		if ctx.Err() != nil {
			t.Fatalf("the step never started: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(containers()); n != 1 {
		t.Fatalf("%d containers during the step, want the setup container", n)
	}
	// A sweep while envctl lives and works: its heartbeat keeps the
	// session (TTL 3 s) alive.
	time.Sleep(4 * time.Second)
	c.ok("lease", "sweep")
	if n := len(containers()); n != 1 {
		t.Fatalf("a sweep while envctl works removed the setup container (%d left)", n)
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = proc.Wait()
	time.Sleep(4 * time.Second) // past the TTL, no heartbeat any more
	var rep struct {
		Sessions struct {
			TimedOut int `json:"timedOut"`
		} `json:"sessions"`
	}
	c.okJSON(&rep, "lease", "sweep")
	if rep.Sessions.TimedOut != 1 {
		t.Errorf("the sweep after kill -9 timed out %d sessions, want 1", rep.Sessions.TimedOut)
	}
	if left := containers(); len(left) != 0 {
		t.Errorf("containers of the killed session left: %v", left[0].Names)
	}
}

// lockedBuffer is a buffer a process's output copier writes while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Issue 30: `envctl image setup --interactive` driven through tmux as a
// person would (send-keys to type, capture-pane to read), on the real
// Docker engine: write a file in the shell, exit, answer y to capture and
// y to promote; a new lease sees the file.
func TestInteractiveSetupThroughTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("BERTH_REQUIRE_REAL") != "" {
			t.Fatalf("tmux: %v (make test installs it)", err)
		}
		t.Skip("no tmux")
	}
	c := newCLI(t)
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveImagesAtCleanup(t, cli, "test.berth/run", run)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	dcfg, _ := json.Marshal(map[string]any{"image": img.Ref, "network": "none", "labels": map[string]string{"test.berth/run": run}})
	c.createEnv("box", "docker", string(dcfg))

	bin, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	sock := "berth-" + run
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", append([]string{"-L", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	cmd := fmt.Sprintf("%s=1 %q --db %q image setup box --interactive --name typed; echo ENVCTL-EXIT=$?; sleep 600", execEnv, bin, c.db)
	tmux("new-session", "-d", "-s", "setup", "-x", "120", "-y", "40", cmd)
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", sock, "kill-server").Run() })
	screen := func() string { return tmux("capture-pane", "-p", "-t", "setup", "-S", "-200") }
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !strings.Contains(screen(), want); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the screen never showed %q:\n%s", want, screen())
			}
		}
	}
	waitFor("/ #")
	tmux("send-keys", "-t", "setup", "echo typed-in-tmux > /tmux-file; echo wr''itten", "Enter")
	waitFor("written")
	tmux("send-keys", "-t", "setup", "exit", "Enter")
	waitFor("capture this sandbox as a template? [y/N]")
	tmux("send-keys", "-t", "setup", "y", "Enter")
	waitFor("promote it? [y/N]")
	tmux("send-keys", "-t", "setup", "y", "Enter")
	waitFor("ENVCTL-EXIT=")
	if s := screen(); !strings.Contains(s, "ENVCTL-EXIT=0") || !strings.Contains(s, ": promoted") {
		t.Fatalf("envctl ended:\n%s", s)
	}

	ctx := context.Background()
	sys, err := openSystem(ctx, &globals{db: c.db, drivers: c.drivers, stdout: io.Discard, stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	h, err := sys.Leases().Acquire(ctx, authz.Principal{ID: "test", Role: authz.RoleLocalOperator}, lease.AcquireRequest{EnvironmentID: envIDOf(t, sys, "box"), Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}) }()
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"cat", "/tmux-file"}})
	if err != nil || string(res.Stdout) != "typed-in-tmux\n" {
		t.Errorf("a new lease reads %q, %v", res.Stdout, err)
	}
}

func envIDOf(t *testing.T, sys *system, name string) string {
	t.Helper()
	list, err := sys.Catalog().List(context.Background(), authz.Principal{ID: "test", Role: authz.RoleLocalOperator}, environment.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		if v.Name == name {
			return v.ID
		}
	}
	t.Fatalf("no environment %s", name)
	return ""
}
