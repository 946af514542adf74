package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// realEnvConfigs saves a Docker environment (busybox, network none) and an
// SSH environment (this host through the test sshd) and returns their
// names with a function that lists the live processes in the target whose
// command line holds a marker.
func realEnvs(t *testing.T, c *cli) map[string]func(marker string) []string {
	t.Helper()
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

	srv := testenv.SSHD(t)
	scfg, _ := json.Marshal(map[string]any{"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []string{srv.KnownHostsLine()}, "workdir": t.TempDir()})
	c.createEnv("host", "ssh", string(scfg))
	// Both targets' processes are this host's processes (the container's
	// in their own pid namespace), so one host /proc scan sees them.
	return map[string]func(string) []string{"box": processesWith, "host": processesWith}
}

// createEnv saves an environment of driver with cfg (JSON).
func (c *cli) createEnv(name, driver, cfg string) {
	c.t.Helper()
	if out, errOut, err := c.exec(cfg, "env", "create", "--name", name, "--driver", driver, "--config", "-"); err != nil {
		c.t.Fatalf("env create %s: %v\n%s%s", name, err, out, errOut)
	}
}

// issue 17: envctl run with the real runner binary in a real Docker
// container and on the real sshd host: output byte-exact, the exit code,
// and Ctrl-C stops the task with a complete proof, nothing left running.
func TestRunInRealTargets(t *testing.T) {
	bin, _ := testenv.RunnerBinarySum(t)
	c := newCLI(t)
	envs := realEnvs(t, c)
	for _, name := range []string{"box", "host"} {
		left := envs[name]
		t.Run(name, func(t *testing.T) {
			out, errOut, err := c.exec("", "run", name, "--company", "acme", "--runner-binary", bin, "--",
				"sh", "-c", `printf 'a\000b\n\377'; printf 'to-stderr' >&2; exit 5`)
			if exitCode(err) != 5 {
				t.Fatalf("run = %v (exit %d), want 5\nstderr:\n%s", err, exitCode(err), errOut)
			}
			if out != "a\x00b\n\xff" {
				t.Errorf("stdout %q, want the task's bytes exactly", out)
			}
			wantContains(t, "stderr", errOut, "to-stderr", "installing the runner", "connecting...",
				"cleanup confirmed (runner: 1 task(s) of 1 runner session(s) stopped and verified")

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errW := &notifyWriter{want: "started (pid", hit: make(chan struct{})}
			var stdout bytes.Buffer
			g := &globals{stdout: &stdout, stderr: errW, stdin: strings.NewReader(""), drivers: c.drivers}
			marker := "5" + time.Now().Format("150405")
			go func() {
				select {
				case <-errW.hit:
					cancel() // Ctrl-C
				case <-time.After(2 * time.Minute):
				}
			}()
			err = runWith(ctx, g, []string{"--db", c.db, "--test-mode", "run", name, "--company", "acme", "--runner-binary", bin, "--",
				"sh", "-c", "sleep " + marker + " & sleep " + marker + "; wait"})
			if exitCode(err) != 130 {
				t.Fatalf("run = %v (exit %d), want 130 after Ctrl-C\nstderr:\n%s", err, exitCode(err), errW.String())
			}
			wantContains(t, "stderr", errW.String(), "stop proof of task", "complete true", "survivors []", "cleanup confirmed (runner: 1 task(s)")
			if l := left(marker); len(l) > 0 {
				t.Errorf("processes of the task left after Ctrl-C: %v", l)
			}
		})
	}
}
