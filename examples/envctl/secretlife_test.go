package main

import (
	"context"
	"github.com/berthdev/berth/drivers/daytona/daytonatest"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/sqlite"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSecretsOutliveLeasesDocker (issue 11 item 1; CFG-7, LEASE-6,
// LEASE-9): through envctl on the real Docker engine, with registry_auth
// set (the engine pulls from a registry that asks for basic auth), a lease
// is acquired, then the environment is deleted or its credential rotated;
// once the lease is past its expiry a sweep from another envctl process
// destroys the container with proof, with the secret version the lease
// recorded.
func TestSecretsOutliveLeasesDocker(t *testing.T) {
	t.Parallel()
	const user, pass = "robot", "pa55-REGAUTH-91c2"
	var locked atomic.Bool
	reg := testenv.StartRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if u, p, ok := req.BasicAuth(); locked.Load() && (!ok || u != user || p != pass) {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"login"}]}`, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	cli := testenv.Docker(t)
	img := testimage.Busybox(t, reg, nil)
	locked.Store(true)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	run := randomHex(t)
	const runLabel = "test.berth/run"
	testenv.RemoveContainersAtCleanup(t, cli, runLabel, run)

	for _, change := range []string{"delete", "rotate"} {
		t.Run(change, func(t *testing.T) {
			c := newCLI(t)
			cfg := map[string]any{
				"image": img.Ref, "labels": map[string]string{runLabel: run}, "startup_timeout": "2m",
				"registry_auth": user + ":" + pass, "pull_policy": "always",
			}
			c.ok("env", "create", "--name", "web", "--driver", "docker", "--config", configFile(t, cfg))
			var l lease.Lease
			c.okJSON(&l, "lease", "acquire", "web", "--company", "acme", "--run", "r1")
			if _, err := cli.ContainerInspect(context.Background(), l.ProviderLeaseID); err != nil {
				t.Fatalf("the leased container: %v", err)
			}
			changeEnvironment(t, c, change, "web", "registry_auth", user+":rotated-"+pass)
			expireLease(t, c, l.ID)
			var rep lease.SweepReport
			c.okJSON(&rep, "lease", "sweep")
			if rep.Expired != 1 || rep.StillPending != 0 {
				t.Errorf("sweep report %+v; want the expired lease destroyed with proof", rep)
			}
			wantCleanLease(t, c, l.ID)
			if _, err := cli.ContainerInspect(context.Background(), l.ProviderLeaseID); err == nil {
				t.Errorf("container %s still exists after the sweep", l.ProviderLeaseID)
			}
			if strings.Contains(c.all.String(), pass) {
				t.Errorf("envctl printed the registry password")
			}
		})
	}
}

// TestSecretsOutliveLeasesDaytona: the same on the Daytona fake, whose API
// key the sweep needs to destroy the sandbox.
func TestSecretsOutliveLeasesDaytona(t *testing.T) {
	t.Parallel()
	srv, err := daytonatest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	snap, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	c.ok("env", "create", "--name", "cloud", "--driver", "daytona", "--config", configFile(t, map[string]any{
		"api_url": srv.URL(), "api_key": srv.APIKey(),
		"snapshot_id": snap,
	}))
	var l lease.Lease
	c.okJSON(&l, "lease", "acquire", "cloud", "--company", "acme", "--run", "r1")
	if n := len(srv.Sandboxes()); n != 1 {
		t.Fatalf("%d Daytona sandboxes after the acquisition, want 1", n)
	}
	changeEnvironment(t, c, "delete", "cloud", "", "")
	expireLease(t, c, l.ID)
	var rep lease.SweepReport
	c.okJSON(&rep, "lease", "sweep")
	if rep.Expired != 1 || rep.StillPending != 0 {
		t.Errorf("sweep report %+v; want the expired lease destroyed with proof", rep)
	}
	wantCleanLease(t, c, l.ID)
	if n := len(srv.Sandboxes()); n != 0 {
		t.Errorf("%d Daytona sandboxes left after the sweep", n)
	}
}

// changeEnvironment deletes environment name (change "delete"), or
// replaces the value of its secret field (change "rotate").
func changeEnvironment(t *testing.T, c *cli, change, name, field, value string) {
	t.Helper()
	switch change {
	case "delete":
		out := c.ok("env", "delete", name)
		wantContains(t, "blast radius before the delete", out, "lease")
		c.ok("env", "delete", name, "--yes")
	case "rotate":
		var v environment.View
		c.okJSON(&v, "env", "show", name)
		cfg := map[string]any(v.Config)
		cfg[field] = value
		c.ok("env", "update", name, "--revision", strconv.FormatInt(v.Revision, 10), "--config", configFile(t, cfg))
	}
}

// expireLease moves lease id's expiry into the past in the SQLite file, as
// if its TTL had passed.
func expireLease(t *testing.T, c *cli, id string) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, c.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := db.Stores().Leases
	l, err := st.GetLease(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	l.ExpiresAt = time.Now().Add(-time.Minute)
	if err := st.UpdateLease(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// wantCleanLease checks that lease id is expired with a confirmed cleanup.
func wantCleanLease(t *testing.T, c *cli, id string) {
	t.Helper()
	var ls []*lease.Lease
	c.okJSON(&ls, "lease", "list")
	for _, l := range ls {
		if l.ID == id {
			if l.Status != lease.StatusExpired || l.Cleanup != "confirmed" {
				t.Errorf("lease %s: status %s cleanup %q (%s); want expired, confirmed", id, l.Status, l.Cleanup, l.CleanupEvidence)
			}
			return
		}
	}
	t.Errorf("lease %s not listed", id)
}

// TestLeaseSweepRetention: `lease sweep` keeps the record of an ended lease
// (with its receipt) within the retention, and prunes it after
// --retention (issue 11 item 7).
func TestLeaseSweepRetention(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	var l lease.Lease
	c.okJSON(&l, "lease", "acquire", "sbx", "--company", "acme", "--run", "r1")
	c.ok("lease", "release", l.ID)
	var rep lease.SweepReport
	c.okJSON(&rep, "lease", "sweep")
	if rep.Pruned != 0 {
		t.Errorf("a sweep with the default retention pruned %d records", rep.Pruned)
	}
	wantContains(t, "lease list within the retention", c.ok("lease", "list"), l.ID)
	c.okJSON(&rep, "lease", "sweep", "--retention", "1ns")
	if rep.Pruned != 1 {
		t.Errorf("sweep --retention 1ns pruned %d records, want 1", rep.Pruned)
	}
	if out := c.ok("lease", "list"); strings.Contains(out, l.ID) {
		t.Errorf("the ended lease is still listed after its retention:\n%s", out)
	}
}
