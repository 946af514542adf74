package docker_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
)

const envCanary = "CANARY-ENV-TOKEN-51d7e0"

// Issue 11 item 2 (CFG-3): the config's env is a secret map. Its values are
// never part of the container's create-time environment (docker inspect on
// the real engine shows none of them), and every command sees them: Exec,
// a streamed exec, a terminal, and the commands of a resumed sandbox. A
// command's own env wins on a clash.
func TestSecretEnvReachesCommandsNotTheContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	if f, _ := e.drv.Schema().Field("env"); f.Kind != config.KindSecretMap {
		t.Fatalf("field %q is %s, want secret_map", "env", f.Kind)
	}
	cfg := e.config(e.img.Ref, map[string]any{"env": map[string]any{"GITHUB_TOKEN": envCanary, "SHARED": "from-config"}})
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lease-secret-env"})

	_, raw, err := e.cli.ContainerInspectWithRaw(ctx, sb.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(envCanary)) || bytes.Contains(raw, []byte("GITHUB_TOKEN")) {
		t.Errorf("docker inspect of %s shows the secret env", sb.ID())
	}

	if got := run(t, ctx, sb, "sh", "-c", `echo "$GITHUB_TOKEN"`); got != envCanary+"\n" {
		t.Errorf("Exec sees GITHUB_TOKEN=%q, want the configured value", got)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `echo "$SHARED"`}, Env: map[string]string{"SHARED": "from-command"}})
	if err != nil || string(res.Stdout) != "from-command\n" {
		t.Errorf("a command's own env: %q, %v; want from-command", res.Stdout, err)
	}

	var out bytes.Buffer
	p, err := sb.(drivers.StreamExecer).Start(ctx, drivers.Command{Argv: []string{"sh", "-c", `echo "$GITHUB_TOKEN"`}}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 || out.String() != envCanary+"\n" {
		t.Errorf("streamed exec: %q, %+v, %v; want the configured value", out.String(), res, err)
	}

	term, err := sb.(drivers.Terminal).OpenTerminal(ctx, drivers.TerminalRequest{Argv: []string{"sh", "-c", `printf '<%s>' "$GITHUB_TOKEN"`}})
	if err != nil {
		t.Fatal(err)
	}
	tout, _ := io.ReadAll(term)
	_ = term.Close()
	if !strings.Contains(string(tout), "<"+envCanary+">") {
		t.Errorf("terminal output %q, want the configured value", tout)
	}

	resumed, err := e.drv.Resume(ctx, cfg, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, ctx, resumed, "sh", "-c", `echo "$GITHUB_TOKEN"`); got != envCanary+"\n" {
		t.Errorf("resumed sandbox: Exec sees %q, want the configured value", got)
	}
}

// A config whose env still holds a secret reference is refused before
// anything is created, naming field and key (the catalog resolves refs
// before Acquire).
func TestUnresolvedSecretEnvIsRefused(t *testing.T) {
	t.Parallel()
	drv := docker.NewConcrete(nil)
	defer drv.Close()
	cfg := config.Config{"image": "busybox@sha256:" + strings.Repeat("a", 64),
		"env": map[string]any{"GITHUB_TOKEN": map[string]any{"$secret": "sec_1", "version": float64(1)}}}
	_, err := drv.Acquire(testCtx(t), cfg, drivers.AcquireRequest{})
	if !errors.Is(err, config.ErrCredentialsMissing) || !strings.Contains(err.Error(), `"env"`) || !strings.Contains(err.Error(), "GITHUB_TOKEN") {
		t.Errorf("Acquire with an unresolved env reference: %v; want ErrCredentialsMissing naming env and GITHUB_TOKEN", err)
	}
}
