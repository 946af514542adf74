package daytona_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/daytonafake"
)

const envCanary = "CANARY-ENV-TOKEN-2b94c1"

// secretEnvConfig is e.config with a secret env holding the canary.
func secretEnvConfig(t *testing.T, e *env) config.Config {
	t.Helper()
	cfg := e.config(t, e.snap.ID)
	cfg["env"] = map[string]any{"GITHUB_TOKEN": envCanary, "SHARED": "from-config"}
	return cfg
}

// Issue 11 item 2 (CFG-3): the config's env is a secret map. It is never
// sent at sandbox creation (the API would show it); each command's envs
// carry it on a daemon that reads envs (v0.167.0 and later), for Exec and
// terminals alike, and a command's own env wins.
func TestSecretEnvTravelsPerCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if f, _ := e.drv.Schema().Field("env"); f.Kind != config.KindSecretMap {
		t.Fatalf("field %q is %s, want secret_map", "env", f.Kind)
	}
	sb, err := e.drv.Acquire(ctx, secretEnvConfig(t, e), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	if v, _ := e.srv.Sandbox(sb.ID()); len(v.Env) != 0 {
		t.Errorf("sandbox env at the provider = %v, want none", v.Env)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `echo "$GITHUB_TOKEN $SHARED"`}, Env: map[string]string{"SHARED": "from-command"}})
	if err != nil || string(res.Stdout) != envCanary+" from-command\n" {
		t.Errorf("Exec: %q, %v; want the secret and the command's own SHARED", res.Stdout, err)
	}
	term, err := drivers.SandboxAs[drivers.Terminal](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := term.OpenTerminal(ctx, drivers.TerminalRequest{Argv: []string{"sh", "-c", `printf '<%s>' "$GITHUB_TOKEN"`}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(ts)
	_ = ts.Close()
	if !strings.Contains(string(out), "<"+envCanary+">") {
		t.Errorf("terminal output %q, want the secret", out)
	}
}

// Issue 11 item 2 with #13: a daemon before v0.167.0 (or one that reports
// no version) ignores envs, so a non-empty secret env is refused with
// drivers.ErrUnsupported naming the daemon version: no command is sent
// (the secret is never inlined into the command string), none runs without
// it, and the error holds no value. Without a config env, commands still
// run there.
func TestSecretEnvOnOldDaemonIsRefused(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"0.166.2", "0.150.0", ""} {
		t.Run("daemon "+version, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{knobs: daytonafake.Knobs{DaemonVersion: version, NoDaemonVersion: version == ""}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sb, err := e.drv.Acquire(ctx, secretEnvConfig(t, e), drivers.AcquireRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Release(context.Background(), drivers.Destroy)
			wantVersion := version
			if version == "" {
				wantVersion = "reports no version"
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), wantVersion) || !strings.Contains(err.Error(), "0.167.0") {
					t.Errorf("%s: %v; want ErrUnsupported naming the daemon version", what, err)
				}
				if err != nil && strings.Contains(err.Error(), envCanary) {
					t.Errorf("%s: the error holds the secret", what)
				}
			}
			_, err = sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `echo "$GITHUB_TOKEN"`}})
			check("Exec", err)
			term, terr := drivers.SandboxAs[drivers.Terminal](sb, 0)
			if terr != nil {
				t.Fatal(terr)
			}
			ts, err := term.OpenTerminal(ctx, drivers.TerminalRequest{})
			if err == nil {
				ts.Close()
			}
			check("OpenTerminal", err)
			if n := e.srv.Calls(daytonafake.RouteExecute); n != 0 {
				t.Errorf("%d execute requests reached the toolbox, want none", n)
			}

			plain := e.config(t, e.snap.ID)
			delete(plain, "env")
			sb2, err := e.drv.Acquire(ctx, plain, drivers.AcquireRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defer sb2.Release(context.Background(), drivers.Destroy)
			if res, err := sb2.Exec(ctx, drivers.Command{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				t.Errorf("Exec without a config env: %+v, %v", res, err)
			}
		})
	}
}
