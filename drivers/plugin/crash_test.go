package plugin_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
)

// pluginProcs returns the processes of binary that are children of this
// test process.
func pluginProcs(t *testing.T, binary string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != binary {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// killPlugin sends SIGKILL to the one process of binary this test runs.
func killPlugin(t *testing.T, binary string) {
	t.Helper()
	pids := pluginProcs(t, binary)
	if len(pids) != 1 {
		t.Fatalf("%d processes of %s, want 1: %v", len(pids), binary, pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// eventually retries f every 50 ms for at most 10 s (the plugin's restart
// backoff) and returns its last error.
func eventually(f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A plugin killed with SIGKILL in the middle of an exec makes the call fail
// with code unavailable naming the plugin; the next call starts it again
// (after the backoff), and a sandbox of the dead process is released by
// id through the new one.
func TestKilledPluginIsStartedAgain(t *testing.T) {
	p := fakePlugin(t)
	d := load(t, p)
	ctx := t.Context()
	cfg := config.Config{"image": fake.DefaultImage}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sleep", "300"}})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	killPlugin(t, p.Binary)
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after the plugin was killed")
	}
	if errcode.Code(err) != errcode.Unavailable || !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), p.Binary) {
		t.Fatalf("Exec through a killed plugin: %v (code %s), want unavailable naming the plugin", err, errcode.Code(err))
	}
	// The next call starts it again. The fake's sandboxes lived in the
	// killed process (and the new one numbers its sandboxes from 1 again),
	// so the old one cannot be resumed, and its release destroys it by
	// id, confirmed.
	err = eventually(func() error {
		_, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}})
		if errcode.Code(err) == errcode.Unavailable {
			return err
		}
		return nil
	})
	if _, xerr := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}}); err != nil || !errors.Is(xerr, errcode.ErrNotFound) {
		t.Errorf("Exec on a sandbox of the killed process: %v, %v, want not found (the fake lost it)", err, xerr)
	}
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		t.Errorf("Release of a sandbox of the killed process: %+v, %v", r, err)
	}
	sb2, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("Acquire after the restart: %v", err)
	}
	if _, err := sb2.Exec(ctx, drivers.Command{Argv: []string{"echo", "again"}}); err != nil {
		t.Errorf("Exec in the new process: %v", err)
	}
	if n := len(pluginProcs(t, p.Binary)); n != 1 {
		t.Errorf("%d plugin processes after the restart, want 1", n)
	}
	if _, err := sb2.Release(ctx, drivers.Destroy); err != nil {
		t.Error(err)
	}
}

// Crashes in a row back off: a call right after a crash fails as
// unavailable, saying when the plugin is started again.
func TestRestartBacksOff(t *testing.T) {
	p := fakePlugin(t)
	d := load(t, p)
	l := d.(drivers.Lister)
	ctx := context.Background()
	for i := range 3 {
		if err := eventually(func() error { _, err := l.List(ctx, config.Config{}, nil); return err }); err != nil {
			t.Fatalf("List %d: %v", i, err)
		}
		killPlugin(t, p.Binary)
	}
	// Until go-plugin has reaped the killed process, a call reaches its
	// dead connection (unavailable, a transport error); the first call
	// after that notes the crash and fails in the backoff it starts.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := l.List(ctx, config.Config{}, nil)
		if errcode.Code(err) == errcode.Unavailable && strings.Contains(err.Error(), "restarted in") {
			break
		}
		if err == nil || errcode.Code(err) != errcode.Unavailable || time.Now().After(deadline) {
			t.Fatalf("List after the third crash: %v, want unavailable in the backoff", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A runner ingress whose plugin is killed is opened again through the
// new process only where that process resumes the sandbox; the fake's
// sandboxes die with their process, so its Accept fails with code
// unavailable, saying why, instead of waiting for ever, and so does a
// launch through it. (testDockerKillRunner opens one again.)
func TestKilledPluginEndsItsRunnerIngress(t *testing.T) {
	p := fakePlugin(t)
	d := load(t, p)
	ctx := t.Context()
	sb, err := d.Acquire(ctx, config.Config{"image": fake.DefaultImage}, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := sb.(drivers.RunnerHost).HostRunner(ctx, drivers.RunnerSpec{Binary: "/nonexistent/berth-runner", SHA256: strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := in.Accept()
		if c != nil {
			c.Close()
		}
		accepted <- err
	}()
	killPlugin(t, p.Binary)
	select {
	case err := <-accepted:
		if errcode.Code(err) != errcode.Unavailable || !errors.Is(err, drivers.ErrUnavailable) || !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("Accept on the ingress of a killed plugin: %v, want unavailable, the new process not finding the sandbox", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept on the ingress of a killed plugin still waits after 10 s")
	}
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: "l", Ticket: "t"}); errcode.Code(err) != errcode.Unavailable {
		t.Errorf("Launch through the killed plugin: %v, want unavailable", err)
	}
	_ = in.Close()
}

// A runner ingress ends with its sandbox's release: its Accept fails as
// closed instead of waiting for ever.
func TestReleaseEndsTheRunnerIngress(t *testing.T) {
	d := load(t, fakePlugin(t))
	ctx := t.Context()
	sb, err := d.Acquire(ctx, config.Config{"image": fake.DefaultImage}, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := sb.(drivers.RunnerHost).HostRunner(ctx, drivers.RunnerSpec{Binary: "/nonexistent/berth-runner", SHA256: strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := in.Accept()
		if c != nil {
			c.Close()
		}
		accepted <- err
	}()
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept on the ingress of a released sandbox: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept on the ingress of a released sandbox still waits after 5 s")
	}
	if err := in.Close(); err != nil {
		t.Errorf("Close after the release: %v", err)
	}
}
