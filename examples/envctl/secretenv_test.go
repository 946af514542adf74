package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
)

// TestSecretEnvDocker (issue 11 item 2, CFG-3): a canary token in a Docker
// environment's config env, created through envctl on a SQLite file and the
// real engine, never appears in envctl's output (create, show, errors,
// lease records), in docker inspect of the leased container, or in any file
// next to the database (the SQLite file, its -wal/-shm, the sealed secrets);
// the command inside the sandbox sees it. The environment's own --env
// still refuses a credential-like name.
func TestSecretEnvDocker(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-GHTOKEN-0e4d9a77"
	ctx := context.Background()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	run := randomHex(t)
	const runLabel = "test.berth/run"
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, runLabel, run)

	c := newCLI(t)
	c.ok("env", "create", "--name", "web", "--driver", "docker", "--config", configFile(t, map[string]any{
		"image": img.Ref, "labels": map[string]string{runLabel: run}, "startup_timeout": "2m",
		"env": map[string]string{"GITHUB_TOKEN": canary},
	}))
	var view environment.View
	c.okJSON(&view, "env", "show", "web")
	ref, ok := config.Config(view.Config).SecretMapRefs("env")["GITHUB_TOKEN"]
	if !ok {
		t.Fatalf("env show: config.env holds no reference for GITHUB_TOKEN: %v", view.Config["env"])
	}
	// The top-level env still refuses a credential-like name.
	_, errOut := c.fail("env", "create", "--name", "top", "--driver", "docker", "--config", configFile(t, map[string]any{"image": img.Ref}),
		"--env", "GITHUB_TOKEN="+canary)
	wantContains(t, "--env GITHUB_TOKEN refusal", errOut, "env.GITHUB_TOKEN", "looks like a credential")
	// A reference of another secret is refused without a value.
	cfg := map[string]any(config.Config(view.Config).Clone())
	cfg["env"] = map[string]any{"GITHUB_TOKEN": config.SecretRef{ID: ref.ID, Version: ref.Version + 5}}
	body, _ := json.Marshal(map[string]any{"baseRevision": view.Revision, "config": cfg})
	_, errOut = c.fail("env", "update", "web", "--json-body", writeFile(t, string(body)))
	wantContains(t, "foreign reference refusal", errOut, "config.env.GITHUB_TOKEN")

	var l lease.Lease
	c.okJSON(&l, "lease", "acquire", "web", "--company", "acme", "--policy", string(lease.ReuseByEnvironment), "--run", "r1")
	_, raw, err := cli.ContainerInspectWithRaw(ctx, l.ProviderLeaseID, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), canary) {
		t.Errorf("docker inspect of %s shows the secret", l.ProviderLeaseID)
	}

	// Another process (here: another System on the same files) resumes the
	// reusable sandbox; its command sees the secret.
	g := &globals{db: c.db, testMode: true, drivers: c.drivers, as: parsePrincipal("local_operator:test")}
	sys, err := openSystem(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, g.as, lease.AcquireRequest{Company: "acme", EnvironmentID: l.Environment, Policy: lease.ReuseByEnvironment, Run: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	if h.SandboxID() != l.ProviderLeaseID {
		t.Errorf("second acquisition got sandbox %s, want the reusable %s", h.SandboxID(), l.ProviderLeaseID)
	}
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", `echo "$GITHUB_TOKEN"`}})
	if err != nil || string(res.Stdout) != canary+"\n" {
		t.Errorf("the command inside sees GITHUB_TOKEN=%q (%v), want the secret", res.Stdout, err)
	}
	sys.Close()

	c.ok("lease", "list", "--json")
	c.ok("lease", "list")
	c.ok("env", "list", "--json")
	if strings.Contains(c.all.String(), canary) {
		t.Errorf("envctl printed the secret")
	}
	entries, err := os.ReadDir(filepath.Dir(c.db))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() { // PATH.runners, the runners' output
			testenv.CanaryInFiles(t, canary, "the secret", filepath.Join(filepath.Dir(c.db), e.Name()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(c.db), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), canary) {
			t.Errorf("%s holds the secret in plain text", e.Name())
		}
	}
	if len(entries) < 2 {
		t.Errorf("the database directory holds %d files, want the SQLite file and the secrets", len(entries))
	}
}
