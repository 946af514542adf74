package controller_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
)

// brokenRunner writes body as an executable "runner" binary and returns
// its spec.
func brokenRunner(t *testing.T, body []byte) drivers.RunnerSpec {
	t.Helper()
	path := filepath.Join(t.TempDir(), "berth-runner")
	if err := os.WriteFile(path, body, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	return drivers.RunnerSpec{Binary: path, SHA256: hex.EncodeToString(sum[:])}
}

// busyboxRunner is a runner binary that is busybox under a name that is
// no applet: it writes "applet not found" to its stderr and exits 1, as a
// runner built wrong does.
func busyboxRunner(t *testing.T) drivers.RunnerSpec {
	t.Helper()
	b, err := os.ReadFile(testimage.BusyboxPath)
	if err != nil {
		testenv.Missing(t, "busybox-static", "apt-get install busybox-static", err)
	}
	return brokenRunner(t, b)
}

// attachFailing leases a sandbox of drv with cfg and spec as its runner,
// attaches with a short deadline and returns the sandbox id and Attach's
// error. before, if not nil, runs on the handle before the release.
func attachFailing(t *testing.T, drv drivers.Driver, cfg map[string]any, spec drivers.RunnerSpec, wait time.Duration, before func(*lease.Handle)) (string, error) {
	t.Helper()
	leases := lease.NewMemoryStore()
	s := newServer(t, serverOptions{Leases: leases, Options: controller.Options{Authorizer: leasePolicy}})
	ctx := context.Background()
	envs, secrets := envhook.NewMemoryStore().(environment.Store), envhook.NewMemorySecretStore().(environment.SecretStore)
	reg := drivers.NewRegistry(drv)
	t.Cleanup(func() { reg.Close() })
	v, err := envhook.NewCatalog(envs, reg, secrets, nil, &envhook.Options{TestMode: true, Authorizer: leasePolicy}).(*environment.Catalog).
		Create(ctx, leaseOperator, environment.CreateRequest{Name: "target", Driver: drv.Name(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, &envhook.Options{TestMode: true, Authorizer: leasePolicy}).(*environment.Assignments)
	mgr, _ := leasehook.New(leasehook.Sources{Store: leases, Drivers: reg, Assignments: asg, Tasks: s.tasks, Options: &lease.Options{InstanceID: "test"}, Secrets: secrets.Get})
	m := mgr.(*lease.Manager)
	t.Cleanup(func() { leasehook.Close(m) })
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	h, err := m.Acquire(actx, leaseOperator, lease.AcquireRequest{Company: "co-1", EnvironmentID: v.ID, Run: "run-1", Runner: &drivers.RunnerSet{Binaries: map[string]drivers.RunnerSpec{runtime.GOARCH: spec}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if before != nil {
			before(h)
		}
		if _, err := h.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Errorf("release: %v", err)
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	att, err := s.c.Attach(wctx, leaseOperator, h, controller.AttachRequest{})
	if err == nil {
		t.Fatalf("Attach of a runner that cannot start succeeded: %+v", att)
	}
	return h.SandboxID(), err
}

// checkAttachError: the error is the deadline's, names the sandbox and a
// unix endpoint, and carries want from the runner's log, one line.
func checkAttachError(t *testing.T, err error, sandbox, want string) {
	t.Helper()
	t.Logf("Attach: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Attach: err = %v, want it to wrap context.DeadlineExceeded", err)
	}
	msg := err.Error()
	for _, w := range []string{"sandbox " + sandbox, " at unix:/", "runner log: ", want} {
		if !strings.Contains(msg, w) {
			t.Errorf("Attach error %q does not contain %q", msg, w)
		}
	}
	if strings.ContainsAny(msg, "\n\r\x00") {
		t.Errorf("Attach error %q holds a control character, want printable text", msg)
	}
}

// Local: a "runner" that is a script printing to stderr and exiting 1;
// Attach fails at its deadline with the script's words.
func TestAttachErrorCarriesTheRunnersLogLocal(t *testing.T) {
	t.Parallel()
	spec := brokenRunner(t, []byte("#!/bin/sh\necho 'berth-test: cannot start: exec format error (simulated)' >&2\nprintf 'binary\\001\\033[31m junk\\n' >&2\nexit 1\n"))
	sb, err := attachFailing(t, local.New(nil), map[string]any{"workdir": t.TempDir()}, spec, 3*time.Second, nil)
	checkAttachError(t, err, sb, "berth-test: cannot start: exec format error (simulated)")
	if strings.Contains(err.Error(), "\x01") || strings.Contains(err.Error(), "\x1b") {
		t.Errorf("Attach error %q holds control bytes of the log", err)
	}
}

// SSH (real sshd): the "runner" is busybox under a name that is no applet.
func TestAttachErrorCarriesTheRunnersLogSSH(t *testing.T) {
	t.Parallel()
	srv := testenv.SSHD(t)
	spec := busyboxRunner(t)
	cfg := map[string]any{
		"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir(),
	}
	sb, err := attachFailing(t, ssh.New(nil), cfg, spec, 10*time.Second, func(h *lease.Handle) {
		// The upload stays after the lease (keyed by its sum): remove it.
		_, _ = h.Exec(context.Background(), lease.Command{Argv: []string{"sh", "-c", `rm -f "$HOME/.cache/berth/runner/` + spec.SHA256 + `"`}})
	})
	checkAttachError(t, err, sb, spec.SHA256+": applet not found")
}

// Docker (real engine): the mounted "runner" is busybox; it runs as
// /.berth/bin/berth-runner, which is no applet.
func TestAttachErrorCarriesTheRunnersLogDocker(t *testing.T) {
	t.Parallel()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	run := "attachlog-" + hex.EncodeToString(nonce[:])
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	spec := busyboxRunner(t)
	cfg := map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}
	sb, err := attachFailing(t, docker.New(nil), cfg, spec, 10*time.Second, nil)
	checkAttachError(t, err, sb, "berth-runner: applet not found")
}

// The sanitized tail keeps printable text, collapses whitespace and keeps
// the end.
func TestPrintableLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"", 10, ""},
		{"a\nb\r\n\tc  \n", 100, "a b c"},
		{"x\x00y\x1b[31mz\xffé", 100, "xy[31mzé"},
		{"0123456789", 4, "...6789"},
		{"aéé", 3, "...é"},
	} {
		if got := controller.PrintableLog([]byte(tc.in), tc.max); got != tc.want {
			t.Errorf("printableLog(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
