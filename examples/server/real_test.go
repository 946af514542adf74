package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// CFG-3, PRB-1/2/5: an SSH environment with a pasted key (real sshd): the
// key appears in no response, log line or database row; its probe
// succeeds with the remote cwd and platform; a wrong key fails naming
// user@host:port.
func TestSSHPastedKeyAndProbe(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			srv := testenv.SSHD(t)
			e := newEnv(t, kind, &envOpts{drivers: []drivers.Driver{ssh.New(nil)}})
			key := srv.ClientKeyPEM()
			cfg := map[string]any{"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
				"private_key": key, "known_hosts": []string{srv.KnownHostsLine()}, "workdir": t.TempDir()}
			var v environment.View
			e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				body: map[string]any{"name": "host", "driver": "ssh", "config": cfg}}).decode(t, &v)
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + v.ID, token: tokAdmin})
			var res probejson.Result
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/environments/" + v.ID + "/probe", token: tokAdmin}).decode(t, &res)
			if !res.OK || res.Cwd == "" || res.Platform.OS != "linux" {
				t.Errorf("probe of the sshd host: %+v", res)
			}
			target := fmt.Sprintf("%s@%s:%d", srv.User(), srv.Host(), srv.Port())
			bad := map[string]any{"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
				"private_key": srv.UnauthorizedKeyPEM(), "known_hosts": []string{srv.KnownHostsLine()}, "workdir": t.TempDir()}
			var w environment.View
			e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				body: map[string]any{"name": "wrong-key", "driver": "ssh", "config": bad}}).decode(t, &w)
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/environments/" + w.ID + "/probe", token: tokAdmin}).decode(t, &res)
			if res.OK || !strings.Contains(res.Summary+res.Target, target) {
				t.Errorf("probe with a wrong key: ok %v, target %q, summary %q; want a failure naming %s", res.OK, res.Target, res.Summary, target)
			}
			// The canary: the pasted key's body is nowhere.
			lines := strings.Split(strings.TrimSpace(key), "\n")
			canary := lines[len(lines)/2]
			if len(canary) < 20 {
				t.Fatalf("canary %q is too short", canary)
			}
			e.bodiesMu.Lock()
			seen := string(e.bodies)
			e.bodiesMu.Unlock()
			if strings.Contains(seen, canary) {
				t.Error("the pasted key appears in a response")
			}
			if strings.Contains(e.logs.String(), canary) {
				t.Error("the pasted key appears in the log")
			}
			if kind == "postgres" {
				testenv.CanaryInPostgres(t, e.dsn, canary)
			} else if n := testenv.CanaryInFiles(t, canary, "the data directory", e.dir); n == 0 {
				t.Error("the canary scan read no file")
			}
		})
	}
}

// A run in Docker (real engine, the busybox test image, the real runner):
// sh -c 'echo hi; exit 3' reads hi, exit status 3 and a confirmed receipt;
// the delete shows its blast radius first; a sweep leaves nothing.
func TestDockerRun(t *testing.T) {
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	bin, _ := testenv.RunnerBinarySum(t)
	spec, err := runnerSpecOf(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			b := make([]byte, 6)
			rand.Read(b)
			mark := hex.EncodeToString(b)
			testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", mark)
			e := newEnv(t, kind, &envOpts{drivers: []drivers.Driver{docker.New(nil)}, runnerSet: drivers.RunnerSetOf(spec)})
			var v environment.View
			e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				body: map[string]any{"name": "box", "driver": "docker", "config": map[string]any{"image": img.Ref, "network": "none", "labels": map[string]string{"test.berth/run": mark}}}}).decode(t, &v)
			run := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sh", "-c", "echo hi; exit 3"}})
			done := e.waitRun(t, "acme", run.ID, tokAdmin, ended)
			if done.Status != runExited || done.Exit == nil || done.Exit.Code != 3 {
				t.Fatalf("run %+v (error %+v)", done, done.Error)
			}
			if done.Receipt == nil || done.Receipt.Cleanup != "confirmed" || done.Receipt.CleanupEvidenceKind == drivers.EvidenceNone {
				t.Errorf("receipt %+v", done.Receipt)
			}
			r := e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/runs/" + run.ID + "/output?from=0", token: tokAdmin,
				header: map[string]string{"Accept": "text/event-stream"}})
			if evs := events(r.body); len(evs) < 2 || !strings.Contains(evs[0][1], `"text":"hi\n"`) || !strings.Contains(evs[len(evs)-1][1], `"code":3`) {
				t.Errorf("output events %q", evs)
			}
			var br environment.BlastRadius
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + v.ID + "/blast-radius", token: tokAdmin}).decode(t, &br)
			e.must(t, http.StatusOK, call{method: "DELETE", path: "/api/v1/environments/" + v.ID, token: tokAdmin, header: map[string]string{"If-Match": etag(br.Revision)}})
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/sweep", token: tokOperator})

			// Shutdown with a run in flight: stopped with proof, the lease
			// released, no container left.
			e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				body: map[string]any{"name": "box2", "driver": "docker", "config": map[string]any{"image": img.Ref, "network": "none", "labels": map[string]string{"test.berth/run": mark}}}}).decode(t, &v)
			long := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}})
			e.waitRun(t, "acme", long.ID, tokAdmin, func(v runView) bool { return v.Status != runStarting })
			if err := e.close(); err != nil {
				t.Fatal(err)
			}
			rn, err := e.s.runs.get(t.Context(), adminPrincipal, "acme", long.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := rn.snapshot()
			if got.Status != runStopped || len(got.Proofs) != 1 || !got.Proofs[0].Complete || got.Receipt == nil || got.Receipt.Cleanup != "confirmed" {
				t.Errorf("after shutdown the run is %+v", got)
			}
			left, err := cli.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "test.berth/run="+mark))})
			if err != nil || len(left) != 0 {
				t.Errorf("containers left after shutdown: %d, %v", len(left), err)
			}
		})
	}
}
