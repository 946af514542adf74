package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/runnerbin"
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
	// Dropbear (issue 23): sessions in the server's process group, and the
	// runner reaches berth through a TCP forward on the server's loopback.
	db := testenv.Dropbear(t)
	bcfg, _ := json.Marshal(map[string]any{"host": db.Host(), "port": db.Port(), "user": db.User(),
		"private_key": db.ClientKeyPEM(), "known_hosts": []string{db.KnownHostsLine()}, "workdir": t.TempDir(), "max_sessions": 2})
	c.createEnv("dropbear", "ssh", string(bcfg))
	// The targets' processes are this host's processes (the container's
	// in their own pid namespace), so one host /proc scan sees them.
	return map[string]func(string) []string{"box": processesWith, "host": processesWith, "dropbear": processesWith}
}

// createEnv saves an environment of driver with cfg (JSON).
func (c *cli) createEnv(name, driver, cfg string) {
	c.t.Helper()
	if out, errOut, err := c.exec(cfg, "env", "create", "--name", name, "--driver", driver, "--config", "-"); err != nil {
		c.t.Fatalf("env create %s: %v\n%s%s", name, err, out, errOut)
	}
}

// issue 17: envctl run with the real runner binary in a real Docker
// container, on the real sshd host and (issue 23) on the real Dropbear
// host through the TCP fallback: output byte-exact, the exit code, and
// Ctrl-C stops the task with a complete proof, nothing left running.
func TestRunInRealTargets(t *testing.T) {
	bin, _ := testenv.RunnerBinarySum(t)
	c := newCLI(t)
	envs := realEnvs(t, c)
	for _, name := range []string{"box", "host", "dropbear"} {
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
			wantContains(t, "stderr", errOut, "to-stderr", "starting the runner (sha256 ", "started on the runner",
				"cleanup confirmed by", "(runner (runner_attested): 1 task(s) of 1 runner session(s) stopped, attested by the runner")

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errW := &notifyWriter{want: "started on the runner", hit: make(chan struct{})}
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
			wantContains(t, "stderr", errW.String(), "stop proof of task", "attested by the runner (runner_attested): complete true", "survivors []",
				"cleanup confirmed by", "(runner (runner_attested): 1 task(s)")
			if strings.Contains(errW.String(), "verified") {
				t.Errorf("stderr calls a runner's proof verified:\n%s", errW.String())
			}
			if l := left(marker); len(l) > 0 {
				t.Errorf("processes of the task left after Ctrl-C: %v", l)
			}
		})
	}
	// issue 52 item 4: an agent's turns in one held Docker lease, each
	// command a System of its own (the real runner relaunched with its
	// resume ticket in the container): the second turn finds the first
	// turn's file, and so do the lease's files (workspace ls).
	t.Run("box-held", func(t *testing.T) {
		out, errOut, err := c.exec("", "run", "box", "--company", "acme", "--workspace", "w", "--hold", "--runner-binary", bin, "--",
			"sh", "-c", "echo one > turn1.txt; echo done")
		if err != nil || out != "done\n" {
			t.Fatalf("run --hold = %v, %q\nstderr:\n%s", err, out, errOut)
		}
		id := heldLease(t, errOut)
		out, errOut, err = c.exec("", "run", "--lease", id, "--", "cat", "turn1.txt")
		if err != nil || out != "one\n" || heldLease(t, errOut) != id {
			t.Fatalf("run --lease %s = %v, %q; want the first turn's file\nstderr:\n%s", id, err, out, errOut)
		}
		_, errOut, err = c.exec("", "run", "box", "--company", "acme", "--workspace", "w", "--hold", "--runner-binary", bin, "--", "true")
		if err != nil || heldLease(t, errOut) != id {
			t.Fatalf("second run --workspace w --hold = %v; want lease %s\nstderr:\n%s", err, id, errOut)
		}
		if ls := c.ok("workspace", "ls", id); !strings.Contains(ls, "turn1.txt") {
			t.Errorf("workspace ls %s lacks turn1.txt:\n%s", id, ls)
		}
		if got := c.ok("lease", "release", id); !strings.Contains(got, "released") || !strings.Contains(got, "cleanup: confirmed") {
			t.Errorf("lease release %s:\n%s", id, got)
		}
	})
	// issue 52 item 5: a held lease keeps its workspace; the next turn,
	// another envctl process ('run --lease'), runs in it and collects what
	// both turns changed, and workspace show reads the changes (the fake's
	// runner runs its tasks on this host, outside the fake's sandbox).
	t.Run("box-held-workspace", func(t *testing.T) {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "f.txt"), []byte("base\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, err := c.exec("", "run", "box", "--company", "acme", "--workspace", "w2", "--workspace-dir", src, "--hold", "--runner-binary", bin, "--",
			"sh", "-c", "echo one >> f.txt")
		if err != nil {
			t.Fatalf("run --workspace-dir --hold = %v\nstderr:\n%s", err, errOut)
		}
		id := heldLease(t, errOut)
		dest := filepath.Join(t.TempDir(), "out")
		out, errOut, err := c.exec("", "run", "--lease", id, "--collect", dest, "--", "sh", "-c", "pwd; echo two >> f.txt")
		if err != nil || !strings.Contains(out, "/.berth/ws/w2-") {
			t.Fatalf("run --lease %s = %v, %q; want it in workspace w2\nstderr:\n%s", id, err, out, errOut)
		}
		if b, err := os.ReadFile(filepath.Join(dest, "f.txt")); err != nil || string(b) != "base\none\ntwo\n" {
			t.Errorf("collected f.txt = %q, %v", b, err)
		}
		wantContains(t, "workspace show", c.ok("workspace", "show", id), "(key w2)", "state:      ready", "changed:    f.txt")
		c.ok("lease", "release", id)
	})
}

// AUTH-2 (issue 18): envctl run --managed-account with the real runner
// binary in a real Docker container and on the real sshd host. With a
// matching project auth check (auth-check record) the task finds the
// account at $MANAGED_ACCOUNT_FILE (default /tmp/berth-managed-account-TASK,
// or --account-file) with mode 0600 and prints its SHA-256, never the
// account; the file is gone after the task. With one project fewer the
// task is refused before it runs: exit 1, the code auth_check_projects
// printed, the lease released. The account is printed nowhere and is in
// no file of envctl's database directory (SQLite with -wal; the secret
// store seals it).
func TestRunManagedAccountInRealTargets(t *testing.T) {
	bin, _ := testenv.RunnerBinarySum(t)
	c := newCLI(t)
	realEnvs(t, c)
	for _, name := range []string{"box", "host"} {
		t.Run(name, func(t *testing.T) {
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			canary := "canary-envctl-account-" + hex.EncodeToString(b)
			sum := sha256.Sum256([]byte(canary))
			var rec handover.AuthCheck
			c.okJSON(&rec, "auth-check", "record", name, "--company", "acme", "--account-file", writeFile(t, canary),
				"--project", "p1", "--project", "p2", "--status", "succeeded")
			reader := `printf '%s\n' "$MANAGED_ACCOUNT_FILE"; stat -c %a "$MANAGED_ACCOUNT_FILE"; sha256sum < "$MANAGED_ACCOUNT_FILE"`
			run := func(extra ...string) (string, string, error) {
				args := append([]string{"run", name, "--company", "acme", "--runner-binary", bin, "--managed-account", rec.AccountRef}, extra...)
				return c.exec("", append(args, "--", "sh", "-c", reader)...)
			}
			custom := "/tmp/envctl-account-" + hex.EncodeToString(b) + "/account"
			for _, file := range []string{"", custom} {
				extra := []string{"--project", "p2", "--project", "p1"}
				if file != "" {
					extra = append(extra, "--account-file", file)
				}
				out, errOut, err := run(extra...)
				if err != nil {
					t.Fatalf("run --managed-account %v: %v\nstderr:\n%s", extra, err, errOut)
				}
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if len(lines) != 3 || lines[1] != "600" || !strings.HasPrefix(lines[2], hex.EncodeToString(sum[:])) {
					t.Errorf("the task printed %q, want its account file's path, mode 600 and the account's SHA-256", out)
				}
				path := lines[0]
				if file == "" && !strings.HasPrefix(path, "/tmp/berth-managed-account-") || file != "" && path != file {
					t.Errorf("$%s = %q, want %q or the default", ManagedAccountFileEnv, path, file)
				}
				if name == "host" { // the sshd host is this host
					if _, err := os.Stat(path); !os.IsNotExist(err) {
						t.Errorf("the account file %s is still there after the task: %v", path, err)
					}
				}
				wantContains(t, "stderr", errOut, "cleanup confirmed")
			}
			if name == "host" {
				_ = os.RemoveAll(filepath.Dir(custom))
			}

			// One project fewer than the check was made for: refused.
			out, errOut, err := run("--project", "p1")
			if exitCode(err) != 1 || err == nil || !strings.Contains(err.Error(), "refused (auth_check_projects)") {
				t.Fatalf("run with one project removed = %v (exit %d), want exit 1 naming auth_check_projects\nstdout:\n%s\nstderr:\n%s", err, exitCode(err), out, errOut)
			}
			if out != "" {
				t.Errorf("the refused task printed %q", out)
			}
			t.Logf("refused: envctl: %v", err)
			wantContains(t, "stderr", errOut, "cleanup confirmed")
			if strings.Contains(c.all.String(), canary) {
				t.Errorf("envctl printed the managed account")
			}
			files := testenv.CanaryInFiles(t, canary, "the managed account", filepath.Dir(c.db))
			t.Logf("%s: canary absent from %d files of the database directory", name, files)
		})
	}
}

// issue 25: envctl run without a runner flag on a local and a Docker
// target, from an empty cache: the runner is built from the module's
// source for the architecture the target reports, once (a progress line
// on stderr), and the task runs with it; the Docker run after the local
// one finds it in the cache (one architecture, one build).
func TestRunWithoutARunnerFlagInRealTargets(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	t.Setenv(RunnerBinaryEnv, "")
	c := newCLI(t)
	cache := t.TempDir()
	c.runnerBuild = &runnerbin.Options{CacheDir: cache}
	c.ok("env", "create", "--name", "here", "--driver", "local", "--config", writeFile(t, `{"workdir":"`+t.TempDir()+`"}`))
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
	for i, name := range []string{"here", "box"} {
		out, errOut, err := c.exec("", "run", name, "--company", "acme", "--", "sh", "-c", `printf 'a\000b\n'; printf 'to-stderr' >&2; exit 4`)
		if exitCode(err) != 4 || out != "a\x00b\n" {
			t.Fatalf("run %s = %q, %v (exit %d); want the bytes and exit 4\nstderr:\n%s", name, out, err, exitCode(err), errOut)
		}
		built := strings.Contains(errOut, "envctl: building the runner for linux/"+runtime.GOARCH)
		if built != (i == 0) {
			t.Errorf("run %s: built the runner %t, want %t (an empty cache first, then a hit)\nstderr:\n%s", name, built, i == 0, errOut)
		}
		wantContains(t, name+" stderr", errOut, "to-stderr", "starting the runner (sha256 ", "started on the runner", "cleanup confirmed by")
	}
	if bins, _ := filepath.Glob(filepath.Join(cache, "*-linux-"+runtime.GOARCH, "berth-runner")); len(bins) != 1 {
		t.Errorf("cached runners %v, want one", bins)
	}
}
