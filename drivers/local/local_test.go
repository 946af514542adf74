package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/proctest"
	"github.com/berthdev/berth/internal/testenv"
)

type harness struct {
	d   drivers.Driver
	cfg config.Config
}

func (h *harness) Driver() drivers.Driver { return h.d }
func (h *harness) Config() config.Config  { return h.cfg.Clone() }
func (h *harness) Close()                 {}

// Broken implements drivertest.FailureHarness: no failure of the error
// table applies to the local driver, which runs on the berth host itself
// (nothing to reach, no credentials, no images, no host keys).
func (h *harness) Broken(drivertest.Failure) (drivertest.Broken, bool) {
	return drivertest.Broken{}, false
}

// RunnersAreHostProcesses implements drivertest.HostProcessHarness: the
// runners are processes of this host.
func (h *harness) RunnersAreHostProcesses() bool { return true }

// RunnerSpec implements drivertest.RunnerHarness: the reference runner,
// built static for this machine.
func (h *harness) RunnerSpec(tb testing.TB) drivers.RunnerSpec {
	bin, sum := testenv.RunnerBinarySum(tb)
	return drivers.RunnerSpec{Binary: bin, SHA256: sum}
}

// TestMain removes the runner binary testenv built.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRunnerBinary()
	os.Exit(code)
}

func newHarness(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
	d := local.New(nil)
	cfg, err := d.Schema().Normalize(map[string]any{"workdir": tb.TempDir()})
	if err != nil {
		return nil, err
	}
	return &harness{d: d, cfg: cfg}, nil
}

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, newHarness)
}

func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, newHarness) }

// workspace is what a local session reads without I/O: its host name,
// working directory and shell, fixed at Acquire.
type workspace interface {
	drivers.Sandbox
	Hostname() string
	Dir() string
	Shell() string
}

func acquire(t *testing.T, raw map[string]any) workspace {
	t.Helper()
	d := local.New(nil)
	cfg, err := d.Schema().Normalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := d.Acquire(context.Background(), cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Release(context.Background(), drivers.Destroy) })
	return sb.(workspace)
}

// PRB-1: the session reports the host name and its verified directory.
func TestReportsHostAndDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sb := acquire(t, map[string]any{"workdir": dir})
	host, _ := os.Hostname()
	want, _ := filepath.EvalSymlinks(dir)
	if sb.Hostname() != host || sb.Dir() != want {
		t.Errorf("Hostname, Dir = %q, %q; want %q, %q", sb.Hostname(), sb.Dir(), host, want)
	}
	if wantID := "local://" + host + want + "#1"; sb.ID() != wantID {
		t.Errorf("ID = %q, want %q", sb.ID(), wantID)
	}
	res, err := sb.Exec(context.Background(), drivers.Command{Argv: []string{"pwd"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != want {
		t.Errorf("pwd = %q, %v; want %q", res.Stdout, err, want)
	}
}

func TestDefaultWorkdirIsCwd(t *testing.T) {
	t.Parallel()
	sb := acquire(t, map[string]any{})
	wd, _ := os.Getwd()
	wd, _ = filepath.EvalSymlinks(wd)
	if sb.Dir() != wd {
		t.Errorf("Dir = %q, want the process cwd %q", sb.Dir(), wd)
	}
}

func TestUnusableWorkdir(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d := local.New(nil)
	for _, dir := range []string{filepath.Join(t.TempDir(), "missing"), file} {
		cfg, err := d.Schema().Normalize(map[string]any{"workdir": dir})
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Acquire(context.Background(), cfg, drivers.AcquireRequest{})
		if !errors.Is(err, errcode.ErrNotFound) || !strings.Contains(err.Error(), dir) {
			t.Errorf("Acquire(workdir %q): err = %v, want ErrNotFound naming the dir", dir, err)
		}
	}
	if _, err := d.Schema().Normalize(map[string]any{"workdir": "relative/dir"}); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("relative workdir: err = %v, want config.ErrInvalid", err)
	}
	cfg, _ := d.Schema().Normalize(map[string]any{"shell": "/nonexistent/sh"})
	if _, err := d.Acquire(context.Background(), cfg, drivers.AcquireRequest{}); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("missing shell: err = %v, want config.ErrInvalid", err)
	}
}

// CAP-2: the host target declares exec, stream_exec, runner_ingress and files.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	d := local.New(nil)
	c := d.Capabilities()
	if c.Kind != drivers.KindHost || c.Declared != drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapRunnerIngress, drivers.CapFiles) {
		t.Errorf("Capabilities = %+v, want host with exec,stream_exec,runner_ingress,files", c)
	}
	if got := drivers.Effective(d, 0); got != c.Declared {
		t.Errorf("Effective = %s, want %s", got, c.Declared)
	}
}

// groupAlive reports whether a process of group pgid, zombies excluded, exists.
func groupAlive(t *testing.T, pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) != syscall.ESRCH
	}
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

// waitGone polls the real process table until group pgid is gone.
func waitGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for groupAlive(t, pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live processes", pgid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readPid polls for the pid file the shell writes.
func readPid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if n, convErr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && convErr == nil && strings.HasSuffix(string(b), "\n") {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid file %s not written", file)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Cancellation kills the whole process group, background children included.
func TestCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	sb := acquire(t, map[string]any{"workdir": t.TempDir()})
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; sleep 300 & sleep 300"}})
		done <- err
	}()
	pgid := readPid(t, pidFile)
	if !groupAlive(t, pgid) {
		t.Fatalf("group %d not running", pgid)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Exec: err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled Exec did not return")
	}
	waitGone(t, pgid)
}

// Release ends background processes the session left running.
func TestReleaseEndsSessionProcesses(t *testing.T) {
	t.Parallel()
	sb := acquire(t, map[string]any{"workdir": t.TempDir()})
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx := context.Background()
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; sleep 300 >/dev/null 2>&1 &"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec: %v %+v", err, res)
	}
	pgid := readPid(t, pidFile)
	if !groupAlive(t, pgid) {
		t.Fatalf("background sleep of group %d is not running", pgid)
	}
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !r.Proves(sb.ID(), drivers.Destroy) || r.Evidence != "session closed, 1 processes ended" {
		t.Errorf("receipt %+v, want confirmed destroyed with 1 process ended", r)
	}
	if groupAlive(t, pgid) {
		t.Errorf("group %d survived Release", pgid)
	}
}

func TestSignalName(t *testing.T) {
	t.Parallel()
	sb := acquire(t, map[string]any{})
	res, err := sb.Exec(context.Background(), drivers.Command{Argv: []string{"sh", "-c", "kill -TERM $$"}})
	if err != nil || res.ExitCode != -1 || res.Signal != "TERM" {
		t.Errorf("self-TERM: %+v, %v; want exit -1 signal TERM", res, err)
	}
	res, err = sb.Exec(context.Background(), drivers.Command{Argv: []string{"berth-no-such-program"}})
	if err != nil || res.ExitCode != 127 {
		t.Errorf("unknown program: %+v, %v; want exit 127", res, err)
	}
}

// Pipes held open by a background grandchild do not hang Exec: WaitDelay
// bounds the wait, and Release ends the grandchild.
func TestGrandchildHoldingPipes(t *testing.T) {
	t.Parallel()
	d := local.New(&local.Options{WaitDelay: 100 * time.Millisecond})
	cfg, _ := d.Schema().Normalize(map[string]any{"workdir": t.TempDir()})
	sb, err := d.Acquire(context.Background(), cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var res *drivers.Result
	go func() {
		defer close(done)
		res, err = sb.Exec(context.Background(), drivers.Command{Argv: []string{"sh", "-c", "echo started; sleep 300 &"}})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Exec hung on pipes held by a grandchild")
	}
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "started\n" {
		t.Errorf("Exec = %+v, %v; want exit 0 with output", res, err)
	}
	r, err := sb.Release(context.Background(), drivers.Destroy)
	if err != nil || !r.Proves(sb.ID(), drivers.Destroy) || r.Evidence != "session closed, 1 processes ended" {
		t.Errorf("Release = %+v, %v", r, err)
	}
}

// The runner's spec is checked before anything is made: a missing or
// non-executable binary is refused naming binary, a sum that is not the
// binary's naming sha256.
func TestHostRunnerChecksTheBinary(t *testing.T) {
	t.Parallel()
	sb := acquire(t, map[string]any{"workdir": t.TempDir()})
	host := sb.(drivers.RunnerHost)
	bin, sum := testenv.RunnerBinarySum(t)
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		spec  drivers.RunnerSpec
		field string
	}{
		{"missing", drivers.RunnerSpec{Binary: bin + ".missing", SHA256: sum}, "binary"},
		{"not executable", drivers.RunnerSpec{Binary: plain, SHA256: sum}, "binary"},
		{"a directory", drivers.RunnerSpec{Binary: filepath.Dir(bin), SHA256: sum}, "binary"},
		{"wrong sum", drivers.RunnerSpec{Binary: bin, SHA256: strings.Repeat("0", 64)}, "sha256"},
		{"relative", drivers.RunnerSpec{Binary: "berth-runner", SHA256: sum}, "binary"},
	} {
		in, err := host.HostRunner(ctx, c.spec)
		if err == nil {
			in.Close()
			t.Errorf("%s: HostRunner succeeded, want an error naming %s", c.name, c.field)
			continue
		}
		if !strings.Contains(err.Error(), "runner spec: "+c.field) {
			t.Errorf("%s: HostRunner = %v, want an error naming %s", c.name, err, c.field)
		}
	}
}

// The ingress socket is in a directory of mode 0700 that Release removes,
// with the runners' state directories; the path is the same for every
// ingress of the lease.
func TestReleaseRemovesTheRunnerDirectory(t *testing.T) {
	t.Parallel()
	d := local.New(nil)
	cfg, err := d.Schema().Normalize(map[string]any{"workdir": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	bin, sum := testenv.RunnerBinarySum(t)
	spec := drivers.RunnerSpec{Binary: bin, SHA256: sum}
	in, err := sb.(drivers.RunnerHost).HostRunner(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	sock := strings.TrimPrefix(in.Endpoint(), "unix:")
	dir := filepath.Dir(sock)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("runner directory %s: %v, %v; want mode 0700", dir, fi, err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Close: %v, want it removed", err)
	}
	in2, err := sb.(drivers.RunnerHost).HostRunner(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if in2.Endpoint() != in.Endpoint() {
		t.Errorf("second ingress at %s, want the lease's path %s", in2.Endpoint(), in.Endpoint())
	}
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runner directory after Release: %v, want it removed", err)
	}
	if _, err := in2.Accept(); err == nil {
		t.Errorf("Accept after Release succeeded, want an error")
	}
}

// The ingress's endpoint is "unix:" and an absolute socket path.
func TestEndpointIsUnixScheme(t *testing.T) {
	sb := acquire(t, map[string]any{"workdir": t.TempDir()})
	bin, sum := testenv.RunnerBinarySum(t)
	in, err := sb.(drivers.RunnerHost).HostRunner(context.Background(), drivers.RunnerSpec{Binary: bin, SHA256: sum})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if !strings.HasPrefix(in.Endpoint(), "unix:/") {
		t.Errorf("Endpoint = %q, want unix: and an absolute path", in.Endpoint())
	}
}

// A runner launched through the ingress is in a session of its own, so the
// session's process groups do not hold it; Release (Destroy) still ends it
// through its mark (drivertest checks that) and says so in the receipt.
// Keep leaves it running.
func TestReleaseEndsLaunchedRunners(t *testing.T) {
	t.Parallel()
	d := local.New(nil)
	bin, sum := testenv.RunnerBinarySum(t)
	ctx := context.Background()
	for _, disp := range []drivers.Disposition{drivers.Destroy, drivers.Keep} {
		cfg, err := d.Schema().Normalize(map[string]any{"workdir": t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
		if err != nil {
			t.Fatal(err)
		}
		in, err := sb.(drivers.RunnerHost).HostRunner(ctx, drivers.RunnerSpec{Binary: bin, SHA256: sum})
		if err != nil {
			t.Fatal(err)
		}
		pid := proctest.LaunchUnserved(t, ctx, in, "lease-1", nil)
		sock := strings.TrimPrefix(in.Endpoint(), "unix:")
		t.Cleanup(func() { os.RemoveAll(filepath.Dir(sock)) }) // Keep leaves the runner its directory
		rc, err := sb.Release(ctx, disp)
		if err != nil {
			t.Fatalf("%s: Release: %v", disp, err)
		}
		switch alive := proctest.Alive(pid); disp {
		case drivers.Destroy:
			if alive {
				t.Errorf("Destroy left the runner (pid %d) running", pid)
			}
			if !strings.Contains(rc.Evidence, "1 runner processes ended") {
				t.Errorf("Destroy evidence = %q, want the runner counted", rc.Evidence)
			}
		case drivers.Keep:
			if !alive {
				t.Errorf("Keep ended the runner (pid %d)", pid)
			}
		}
	}
}
