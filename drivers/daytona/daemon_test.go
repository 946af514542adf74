package daytona_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/daytonafake"
)

// requireShell returns the path of shell, failing under BERTH_REQUIRE_REAL
// and skipping otherwise when it is missing (make prereqs installs dash,
// bash and zsh).
func requireShell(t *testing.T, shell string) string {
	t.Helper()
	p, err := exec.LookPath(shell)
	if err != nil {
		if os.Getenv("BERTH_REQUIRE_REAL") != "" {
			t.Fatalf("%s is not installed: %v", shell, err)
		}
		t.Skipf("%s is not installed", shell)
	}
	return p
}

// Issue #13 item 3: Exec works with every daemon shape the API may report
// (shell exec with envs, shell exec without envs, the split-and-run exec
// before v0.156.0, no version at all) and under every shell the daemon may
// pick (dash as Debian's sh, bash, zsh): env vars are never dropped, quoting
// and stdin survive.
func TestExecAcrossDaemonVersionsAndShells(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"dash", "bash", "zsh"} {
		path := requireShell(t, shell)
		for _, version := range []string{"0.190.0", "0.166.2", "0.155.0", "0.150.0", ""} {
			t.Run(shell+"/"+version, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, envOptions{knobs: daytonafake.Knobs{Shell: path, DaemonVersion: version, NoDaemonVersion: version == ""}})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cfg := e.config(t, e.snap.ID)
				delete(cfg, "env") // a secret env needs envs (TestSecretEnvOnOldDaemonIsRefused)
				sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
				if err != nil {
					t.Fatal(err)
				}
				defer sb.Release(context.Background(), drivers.Destroy)
				res, err := sb.Exec(ctx, drivers.Command{
					Argv:  []string{"sh", "-c", `printf '%s|%s|' "$GREETING" "$1"; cat`, "x", `it's "a  b" $HOME`},
					Env:   map[string]string{"GREETING": `hi 'there' "$USER"`},
					Stdin: strings.NewReader("in\n"),
				})
				if err != nil {
					t.Fatalf("Exec: %v", err)
				}
				want := `hi 'there' "$USER"|it's "a  b" $HOME|in` + "\n"
				if string(res.Stdout) != want || res.ExitCode != 0 {
					t.Errorf("stdout %q exit %d (stderr %q), want %q", res.Stdout, res.ExitCode, res.Stderr, want)
				}
			})
		}
	}
}

// Issue #13 item 3: a command that cannot travel to a daemon without a
// shell (its stdin makes it longer than one argument) is refused with
// drivers.ErrUnsupported naming the daemon version, not cut.
func TestExecTooLargeForOldDaemonIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{DaemonVersion: "0.150.0"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := e.config(t, e.snap.ID)
	delete(cfg, "env") // refused for its own reason on this daemon
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	_, err = sb.Exec(ctx, drivers.Command{Argv: []string{"wc", "-c"}, Stdin: strings.NewReader(strings.Repeat("x", 200<<10))})
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), "0.150.0") {
		t.Errorf("Exec of a 200 KiB stdin on daemon 0.150.0: err = %v, want ErrUnsupported naming the version", err)
	}
	if n := e.srv.Calls(daytonafake.RouteExecute); n != 0 {
		t.Errorf("%d execute requests, want none", n)
	}
}

// Issue #13 item 8: the proxy may replay an execute request, so a command
// runs twice, overlapping; the wrapper keeps each run's files apart, so the
// answer is still whole, stdin included.
func TestExecSurvivesAReplayedRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{ReplayExecute: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	for range 3 {
		res, err := sb.Exec(ctx, drivers.Command{
			Argv:  []string{"sh", "-c", "echo start; cat; sleep 0.2; echo end; echo err >&2"},
			Stdin: strings.NewReader("in\n"),
		})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if string(res.Stdout) != "start\nin\nend\n" || string(res.Stderr) != "err\n" || res.ExitCode != 0 {
			t.Errorf("replayed Exec: stdout %q stderr %q exit %d, want start/in/end, err, 0", res.Stdout, res.Stderr, res.ExitCode)
		}
	}
}
