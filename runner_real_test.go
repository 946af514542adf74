package berth_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// realTarget is a saved environment of a real driver for runner tests.
type realTarget struct {
	driver string
	config map[string]any
	// cut drops the runner's way to the host without touching the runner.
	cut func(t *testing.T, sys *berth.System, session string)
	// left returns the live processes in the target whose command line
	// contains marker.
	left func(t *testing.T, h *lease.Handle, marker string) []string
	// sshd is the test sshd of an ssh target.
	sshd *testenv.SSHServer
}

var realOperator = authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

// dockerTarget is a busybox container without a network.
func dockerTarget(t testing.TB) realTarget {
	_, img, run := dockerRig(t)
	return realTarget{driver: "docker", config: map[string]any{
		"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run},
	}, cut: func(t *testing.T, sys *berth.System, session string) {
		if ok, err := berth.Runners(sys).Disconnect(context.Background(), realOperator, session); err != nil || !ok {
			t.Fatalf("Disconnect = %t, %v", ok, err)
		}
	}, left: func(t *testing.T, h *lease.Handle, marker string) []string {
		// In the container: /proc of its pid namespace (the [x] keeps
		// grep's own command line from matching).
		pat := marker[:len(marker)-1] + "[" + marker[len(marker)-1:] + "]"
		res, err := h.Exec(context.Background(), lease.Command{Argv: []string{"sh", "-c",
			`for p in /proc/[0-9]*; do s=$(cat $p/stat 2>/dev/null) || continue; case "$s" in *") Z "*) continue;; esac; tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q "` + pat + `" && echo ${p#/proc/}; done; true`}})
		if err != nil {
			t.Fatalf("scan the container's /proc: %v", err)
		}
		return strings.Fields(string(res.Stdout))
	}}
}

// sshTarget is this host through the test sshd.
func sshTarget(t testing.TB) realTarget {
	srv := testenv.SSHD(t)
	return realTarget{driver: "ssh", sshd: srv, config: map[string]any{
		"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir(),
	}, cut: func(t *testing.T, _ *berth.System, _ string) {
		// Kill sshd's per-connection processes: the TCP connection (and
		// the remote forward) drops; the runner runs in its own session.
		kids := childrenOf(srv.PID())
		if len(kids) == 0 {
			t.Fatal("no sshd connection process to kill")
		}
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}, left: func(_ *testing.T, _ *lease.Handle, marker string) []string {
		return hostProcessesWith([]byte(marker), "cmdline")
	}}
}

// localTarget is this host through the local driver. A local task's cut
// is the controller dropping the runner's connection (the runner dials a
// unix socket on this host).
func localTarget(t testing.TB) realTarget {
	return realTarget{driver: "local", config: map[string]any{"workdir": t.TempDir()},
		cut: func(t *testing.T, sys *berth.System, session string) {
			if ok, err := berth.Runners(sys).Disconnect(context.Background(), realOperator, session); err != nil || !ok {
				t.Fatalf("Disconnect = %t, %v", ok, err)
			}
		}, left: func(_ *testing.T, _ *lease.Handle, marker string) []string {
			return hostProcessesWith([]byte(marker), "cmdline")
		}}
}

// attachRunner saves an environment name of driver with config in sys,
// acquires a lease of it for sys's runner and attaches the runner. The
// lease is released at cleanup (nothing to do when the test released it);
// register sys.Close with t.Cleanup before, so that it runs after.
func attachRunner(t testing.TB, ctx context.Context, sys *berth.System, name, driver string, config map[string]any) (*lease.Handle, *controller.Attachment, drivers.RunnerSpec) {
	t.Helper()
	v, err := sys.Catalog().Create(ctx, realOperator, environment.CreateRequest{Name: name, Driver: driver, Config: config})
	if err != nil {
		t.Fatal(err)
	}
	set, err := sys.RunnerSet()
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, realOperator, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Runner: set})
	if err != nil {
		t.Fatal(err)
	}
	spec := *h.Lease().Runner
	t.Cleanup(func() { _, _ = h.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy}) })
	att, err := berth.Runners(sys).Attach(ctx, realOperator, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return h, att, spec
}

func randomHex(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// childrenOf returns the pids whose parent is pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		f := strings.Fields(string(st[i+2:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(e.Name())
			out = append(out, n)
		}
	}
	return out
}

// hostProcessesWith returns the live host processes whose /proc file
// (cmdline, environ) contains s.
func hostProcessesWith(s []byte, file string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), file))
		if err != nil || !bytes.Contains(b, s) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// issue 17: the real runner binary in a real Docker container (busybox,
// network none), on the real sshd host and on this host (local), through
// lease: output
// byte-exact, the exit code, a cut connection the runner survives with
// complete output, a stop with a complete proof and nothing left, and a
// release whose receipt starts with the runner's proof.
func TestRunnerTasksInRealTargets(t *testing.T) {
	bin, _ := testenv.RunnerBinarySum(t)
	for name, mk := range map[string]func(testing.TB) realTarget{"docker": dockerTarget, "docker-runsc": dockerRunscTarget, "ssh": sshTarget, "local": localTarget} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := mk(t)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil), ssh.New(nil), local.New(nil)}, RunnerBinary: bin})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sys.Close() })
			h, att, spec := attachRunner(t, ctx, sys, "runner-"+name, tg.driver, tg.config)
			if att.Hello().BinarySHA256 != spec.SHA256 || att.Hello().Platform.OS != "linux" {
				t.Errorf("hello: binary %s platform %s, want the spec's sum and linux", att.Hello().BinarySHA256, att.Hello().Platform)
			}
			tasks := map[string]*controller.Task{}
			start := func(id string, argv ...string) {
				t.Helper()
				task, err := att.Start(ctx, realOperator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: id, Argv: argv}})
				if err != nil {
					t.Fatal(err)
				}
				tasks[id] = task
			}
			result := func(id string) prp.Result {
				t.Helper()
				exit, err := tasks[id].Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return prp.Result{Status: prp.ResultDone, Exit: &exit}
			}
			output := func(id string, s prp.Stream) string {
				t.Helper()
				b, err := berth.Runners(sys).Output(ctx, realOperator, att.Session(), id, s)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}

			// Byte-exact output on two streams, and the exit code.
			start("bytes", "sh", "-c", `printf 'a\000b\n\377'; printf 'to-stderr' >&2; exit 7`)
			if res := result("bytes"); res.Exit == nil || res.Exit.Code != 7 {
				t.Errorf("exit %+v, want 7", res.Exit)
			}
			if got := output("bytes", prp.Stdout); got != "a\x00b\n\xff" {
				t.Errorf("stdout %q", got)
			}
			if got := output("bytes", prp.Stderr); got != "to-stderr" {
				t.Errorf("stderr %q", got)
			}

			// A task that names no working directory runs in the sandbox's
			// default one, as the handle's commands do (never "/" by
			// accident of how the runner was launched).
			res, err := h.Exec(ctx, lease.Command{Argv: []string{"pwd"}})
			if err != nil {
				t.Fatal(err)
			}
			start("pwd", "pwd")
			if r := result("pwd"); r.Exit == nil || r.Exit.Code != 0 {
				t.Errorf("pwd: exit %+v", r.Exit)
			}
			if got, want := output("pwd", prp.Stdout), string(res.Stdout); got != want {
				t.Errorf("a task's default working directory is %q, want the sandbox's %q", got, want)
			}

			// The connection is cut mid-task; the task goes on, the runner
			// reconnects, the output is complete.
			start("cut", "sh", "-c", `i=0; while [ $i -lt 60 ]; do echo line-$i; i=$((i+1)); sleep 0.05; done`)
			for deadline := time.Now().Add(time.Minute); !strings.Contains(output("cut", prp.Stdout), "line-3"); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no output of the cut task")
				}
			}
			tg.cut(t, sys, att.Session())
			if res := result("cut"); res.Exit == nil || res.Exit.Code != 0 {
				t.Errorf("cut task: exit %+v, want 0", res.Exit)
			}
			var want strings.Builder
			for i := range 60 {
				fmt.Fprintf(&want, "line-%d\n", i)
			}
			if got := output("cut", prp.Stdout); got != want.String() {
				t.Errorf("output of the cut task:\n%q\nwant\n%q", got, want.String())
			}

			// A stop: a complete proof, nothing left in the target.
			marker := "4" + strconv.Itoa(int(time.Now().UnixNano()%1e6)+1e6)
			start("stop", "sh", "-c", "sleep "+marker+" & sleep "+marker+"; wait")
			for deadline := time.Now().Add(time.Minute); len(tg.left(t, h, marker)) < 2; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the stop task's sleeps never showed up")
				}
			}
			p, err := tasks["stop"].Stop(ctx)
			if err != nil {
				t.Fatalf("Stop: %v (proof %+v)", err, p)
			}
			if !p.Complete || len(p.Survivors) != 0 || p.TaskID != "stop" || p.Evidence != drivers.EvidenceRunnerAttested {
				t.Errorf("proof %+v, want task stop's, complete without survivors, runner_attested", p)
			}
			if left := tg.left(t, h, marker); len(left) > 0 {
				t.Errorf("processes of the stopped task left: %v", left)
			}

			l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
			if err != nil {
				t.Fatalf("Release: %v", err)
			}
			if l.Cleanup != "confirmed" || !strings.HasPrefix(l.CleanupEvidence, "runner (runner_attested): 4 task(s) of 1 runner session(s) stopped, attested by the runner") {
				t.Errorf("receipt %s %q, want confirmed with the runner's proof first", l.Cleanup, l.CleanupEvidence)
			}
			t.Logf("%s receipt: %s", name, l.CleanupEvidence)
			if tg.driver != "docker" {
				// The host lease's tag check ended the runner too.
				if left := hostProcessesWith([]byte("BERTH_LEASE"+"="+h.ID()+"\x00"), "environ"); len(left) > 0 {
					t.Errorf("processes tagged with lease %s left on the host: %v", h.ID(), left)
				}
			}
		})
	}
}
