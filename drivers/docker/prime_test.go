package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/internal/testenv"
)

// warmPass names the conformance subtests the warm pass runs: the exec
// contract, each subtest's first command running through the exec its
// Acquire primed (drivers.AcquireRequest.Warm).
var warmPass = []string{
	"acquire exec release",
	"stdout and stderr are kept apart",
	"exit codes",
	"env and dir are honoured",
	"stdin",
	"output limit truncates",
	"exec after release",
	"cancellation stops a running command promptly",
	"stream exec signals are the shared set",
}

// warmHarness is the conformance harness on the warm driver.
type warmHarness struct {
	*harness
	drv docker.WarmDriver
}

func (h warmHarness) Driver() drivers.Driver { return h.drv }

// The exec contract holds for a warm sandbox's first command, which
// runs through the exec that Acquire primed.
func TestConformanceWarm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	warm := docker.NewWarm(nil)
	t.Cleanup(func() { _ = warm.Close() })
	cfg := e.config(e.img.Ref, nil)
	drivertest.RunConformanceTests(t, testenv.Subset(t, func(_ context.Context, _ testing.TB) (drivertest.Harness, error) {
		return warmHarness{&harness{e: e, cfg: cfg}, warm}, nil
	}, warmPass))
}

// A warm sandbox's first command makes no exec of its own (the primed one
// runs it), under runc and under runsc, with its arguments, environment
// and stdin as given; the next command makes its own; a command the primed
// exec cannot carry exactly (another directory) takes the ordinary path,
// as does a first command after a terminal; a release closes an unused
// primed exec, leaving no process of it.
func TestWarmFirstExec(t *testing.T) {
	t.Parallel()
	for _, rt := range []string{"", "runsc"} {
		t.Run("runtime="+rt, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			over := map[string]any{}
			if rt != "" {
				requireRunsc(t, e)
				over["runtime"], over["network"] = rt, "none"
			}
			p := startCallProxy(t, e.cli.DaemonHost())
			over["host"] = p.host
			cfg := e.config(e.img.Ref, over)
			warm := docker.NewWarm(nil)
			t.Cleanup(func() { _ = warm.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			acquire := func() drivers.Sandbox {
				t.Helper()
				sb, err := warm.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "warm"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _, _ = sb.Release(context.Background(), drivers.Destroy) })
				p.take()
				return sb
			}
			execCreated := func() bool { return contains(shapes(p.take()), "POST /containers/{id}/exec") }

			sb := acquire()
			res, err := sb.Exec(ctx, drivers.Command{
				Argv: []string{"sh", "-c", `printf '%s|' "$@"; printf '%s' "$V"; echo err >&2; exit 3`, "sh", "a'b", "c\nd", ` "$e" `, ""},
				Env:  map[string]string{"V": "v'\n$HOME;`x`"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := "a'b|c\nd| \"$e\" ||v'\n$HOME;`x`"; string(res.Stdout) != want || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
				t.Fatalf("first command: stdout %q stderr %q exit %d, want %q, \"err\\n\", 3", res.Stdout, res.Stderr, res.ExitCode, want)
			}
			if execCreated() {
				t.Fatal("the first command of a warm sandbox made an exec of its own, want the primed one")
			}
			if res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "two"}}); err != nil || string(res.Stdout) != "two\n" {
				t.Fatalf("second command: %v %+v", err, res)
			}
			if !execCreated() {
				t.Fatal("the second command made no exec: a primed exec serves one command")
			}

			sb = acquire()
			res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("in\nput")})
			if err != nil || string(res.Stdout) != "in\nput" || res.ExitCode != 0 {
				t.Fatalf("first command with stdin: %v %+v", err, res)
			}
			if execCreated() {
				t.Fatal("the first command with stdin made an exec of its own")
			}

			sb = acquire()
			res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"pwd"}, Dir: "/tmp"})
			if err != nil || string(res.Stdout) != "/tmp\n" {
				t.Fatalf("first command in /tmp: %v %+v", err, res)
			}
			if !execCreated() {
				t.Fatal("a first command in another directory made no exec: the primed one cannot carry it")
			}

			sb = acquire()
			term, err := sb.(drivers.Terminal).OpenTerminal(ctx, drivers.TerminalRequest{Argv: []string{"sh", "-c", "exit 0"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := term.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			_ = term.Close()
			p.take()
			if res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				t.Fatalf("a command after a terminal: %v %+v", err, res)
			}
			if !execCreated() {
				t.Fatal("a command after a terminal made no exec: the terminal, run first, closes the primed one")
			}

			sb = acquire()
			if _, err := sb.Release(ctx, drivers.Keep); err != nil {
				t.Fatal(err)
			}
			for {
				out := engineExec(ctx, t, e, sb.ID(), "ps", "-o", "args")
				if !strings.Contains(out, "berth_cmd") {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the unused primed exec still runs after a release:\n%s", out)
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
}

// engineExec runs argv in container id through the engine directly and
// returns its stdout. It waits at most 30 s (and no longer than ctx) for
// the exec's output to end: the read of an attached stream does not
// watch a context, and an exec whose stream never ended once held a CI
// run for 22 minutes under runsc.
func engineExec(ctx context.Context, t *testing.T, e *env, id string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := e.cli.ContainerExecCreate(ctx, id, container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: argv})
	if err != nil {
		t.Fatal(err)
	}
	hj, err := e.cli.ContainerExecAttach(ctx, c.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Close()
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	var out, errb strings.Builder
	_, err = stdcopy.StdCopy(&out, &errb, hj.Reader)
	if ctx.Err() != nil {
		t.Fatalf("the engine's exec of %q in container %s: its output did not end: %v (stdout so far %q, stderr %q)", argv, id, ctx.Err(), out.String(), errb.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String()
}
