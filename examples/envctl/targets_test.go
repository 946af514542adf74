package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers/daytona/daytonatest"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// configFile writes cfg as a JSON config file and returns its path.
func configFile(t *testing.T, cfg map[string]any) string {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, string(b))
}

// TestProbeSSH: `envctl probe` of a saved SSH environment against a real
// sshd connects with the pinned host key, reports the remote working
// directory and platform, says what it did not validate (PRB-2), and a
// mismatched host key fails with its stable code (PRB-5, PRB-8). The
// private key is never printed.
func TestProbeSSH(t *testing.T) {
	t.Parallel()
	srv := testenv.SSHD(t)
	c := newCLI(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	create := func(name, knownHost string) {
		c.ok("env", "create", "--name", name, "--driver", "ssh", "--config", configFile(t, map[string]any{
			"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
			"private_key": srv.ClientKeyPEM(), "known_hosts": []string{knownHost}, "workdir": dir,
		}))
	}
	create("box", srv.KnownHostsLine())
	target := srv.User() + "@" + srv.Host() + ":" + strconv.Itoa(srv.Port())

	out, progress, err := c.exec("", "probe", "box", "--company", "acme")
	if err != nil {
		t.Fatalf("probe box: %v\n%s%s", err, out, progress)
	}
	wantContains(t, "ssh probe", out, "probe OK", "trusted host key", target, dir, "platform: linux", "This probe did NOT validate an adapter, a workspace or task execution.",
		"platform qualification recorded: false")
	wantContains(t, "ssh progress", progress, "acquire", "detect", "release")

	create("impostor", srv.MismatchedKnownHostsLine())
	var res probejson.Result
	out, _, err = c.exec("", "--json", "probe", "impostor", "--company", "acme")
	if err == nil || json.Unmarshal([]byte(out), &res) != nil || res.OK || res.Code != "host_key_mismatch" || res.Cwd != "" {
		t.Errorf("probe with a mismatched host key: err=%v code=%s\n%s", err, res.Code, out)
	}
	if all := c.all.String(); strings.Contains(all, "PRIVATE KEY") || strings.Contains(all, srv.ClientKeyPEM()) {
		t.Errorf("key material was printed")
	}
}

// TestProbeDocker: `envctl probe` of a Docker environment on this machine's
// engine with an image pinned on a loopback registry records a
// qualification bound to the image (PRB-3, QUAL-1); the same image by tag
// probes fine and is not recorded (QUAL-5).
func TestProbeDocker(t *testing.T) {
	t.Parallel()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	run := randomHex(t)
	const runLabel = "test.berth/run"
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, runLabel, run)

	c := newCLI(t)
	create := func(name, ref string) {
		c.ok("env", "create", "--name", name, "--driver", "docker", "--config", configFile(t, map[string]any{
			"image": ref, "labels": map[string]string{runLabel: run}, "startup_timeout": "2m",
		}))
	}
	create("pinned", img.Ref)
	create("tagged", img.TagRef)

	var res probejson.Result
	c.okJSON(&res, "probe", "pinned", "--company", "acme")
	if !res.OK || !res.PlatformQualificationRecorded || res.ImageIdentity.String() != img.Ref ||
		res.Platform.OS != "linux" || res.Cleanup == nil || !res.Cleanup.Confirmed {
		t.Errorf("docker probe of a pinned image: ok=%t recorded=%t image=%s platform=%s cleanup=%+v\n%s",
			res.OK, res.PlatformQualificationRecorded, res.ImageIdentity, res.Platform, res.Cleanup, res.Summary)
	}
	wantContains(t, "qualification show", c.ok("qualification", "show", "pinned", "--company", "acme"), "is qualified", "linux/")

	res = probejson.Result{}
	c.okJSON(&res, "probe", "tagged", "--company", "acme")
	if !res.OK || res.PlatformQualificationRecorded || res.QualificationDiagnostic == nil {
		t.Errorf("docker probe of a tag: ok=%t recorded=%t diag=%v", res.OK, res.PlatformQualificationRecorded, res.QualificationDiagnostic)
	}
}

// TestDockerWithoutEngine (CAP-1, CAP-3, ASG-2, PRB-5): the Docker driver
// is constructed and listed without an engine (no I/O at construction). An
// environment on an engine that is not there is "not measured" until
// something measures it; its probe measures first and fails with
// provider_unavailable, nothing else tried in its place (PRB-8); from then
// on listings show it unavailable with the reason and time (without
// measuring), resolution refuses it naming the binding, and a successful
// measurement clears it.
func TestDockerWithoutEngine(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wantContains(t, "drivers", c.ok("drivers"), "docker", "sandbox", "container", "kubernetes")
	sock := filepath.Join(t.TempDir(), "no-engine.sock")
	c.ok("env", "create", "--name", "gone", "--driver", "docker", "--config", configFile(t, map[string]any{
		"host": "unix://" + sock, "image": "127.0.0.1:5/berth/none@sha256:" + strings.Repeat("a", 64),
	}))
	wantContains(t, "env list before any measurement", c.ok("env", "list"), "gone", "not measured")
	c.ok("assign", "set", "default", "gone")
	wantContains(t, "resolve before any measurement", c.ok("assign", "resolve", "--company", "acme"), "gone")

	var res probejson.Result
	out, _, err := c.exec("", "--json", "probe", "gone", "--company", "acme")
	if err == nil || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("probe without an engine: err=%v\n%s", err, out)
	}
	st, _ := stageOf(res, "resolve")
	if res.OK || res.Code != "provider_unavailable" || st.OK || st.Code != "provider_unavailable" || !strings.Contains(st.Error, sock) {
		t.Errorf("probe without an engine: code %s, resolve stage %+v; want provider_unavailable naming the socket", res.Code, st)
	}
	if acq, _ := stageOf(res, "acquire"); !acq.Skipped {
		t.Errorf("acquire ran after the provider was found unavailable: %+v", acq)
	}
	list := c.ok("env", "list")
	wantContains(t, "env list after the probe", list, "unavailable", "last measured unavailable", sock)
	wantContains(t, "drivers after the probe", c.ok("drivers"), "endpoint unix://"+sock, "UNAVAILABLE (provider_unavailable)")
	_, msg := c.fail("assign", "resolve", "--company", "acme")
	wantContains(t, "resolve after the probe", msg, "instance default", "gone", "last measured unavailable")
	// An explicit refresh measures again: still down, still refused.
	wantContains(t, "env health", c.ok("env", "health", "gone"), "unix://"+sock, "unavailable")
	// CAP-3: lease acquisition passes the same gate; nothing is created.
	_, msg = c.fail("lease", "acquire", "gone", "--company", "acme")
	wantContains(t, "lease acquire after the probe", msg, "gone", "last measured unavailable")
	if out := c.ok("lease", "list", "--json"); strings.Contains(out, `"status":"active"`) {
		t.Errorf("a refused acquisition left an active lease:\n%s", out)
	}
}

// TestLeaseAcquirePassesTheGate (CAP-3, CFG-4): an environment of a
// test-only driver saved in test mode is listed unavailable and refused by
// lease acquisition once test mode is off, as resolution and probes refuse
// it: lease acquire is no way around the gate.
func TestLeaseAcquirePassesTheGate(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "envctl.db")
	if _, errOut, err := runCLI(t, "", "--db", db, "--test-mode", "env", "create", "--name", "sbx", "--driver", "fake"); err != nil {
		t.Fatalf("create: %v\n%s", err, errOut)
	}
	out, _, err := runCLI(t, "", "--db", db, "env", "list")
	if err != nil || !strings.Contains(out, "test mode is off") {
		t.Errorf("env list without test mode: %v\n%s", err, out)
	}
	_, _, err = runCLI(t, "", "--db", db, "lease", "acquire", "sbx", "--company", "acme")
	if err == nil || !strings.Contains(err.Error(), "test mode is off") {
		t.Errorf("lease acquire of a test driver without test mode: %v; want a refusal naming test mode", err)
	}
	if _, _, err := runCLI(t, "", "--db", db, "--test-mode", "lease", "acquire", "sbx", "--company", "acme"); err != nil {
		t.Errorf("lease acquire in test mode: %v", err)
	}
}

// TestFakeUnavailableOutsideTestMode (CAP-3, CFG-4): with test mode off,
// `envctl drivers` lists the fake as unavailable with the reason.
func TestFakeUnavailableOutsideTestMode(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "envctl.db")
	out, errOut, err := runCLI(t, "", "--db", db, "drivers")
	if err != nil {
		t.Fatalf("drivers: %v\n%s", err, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " fake ") && !strings.Contains(line, "no: driver \"fake\" is for tests only and test mode is off") {
			t.Errorf("fake outside test mode: %q", line)
		}
	}
	if !strings.Contains(out, "fake") {
		t.Errorf("drivers lacks fake:\n%s", out)
	}
	out, _, err = runCLI(t, "", "--db", db, "--test-mode", "drivers")
	if err != nil || strings.Contains(out, "test mode is off") {
		t.Errorf("drivers in test mode: %v\n%s", err, out)
	}
}

// TestProbeDaytona: `envctl probe` of a Daytona environment on the fake
// Daytona API reports the live snapshot and the platform, destroys the
// sandbox and records the qualification for the pinned snapshot id.
func TestProbeDaytona(t *testing.T) {
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
	const canaryFree = "daytonatest-key" // the fake's key: must not be printed either
	c.ok("env", "create", "--name", "cloud", "--driver", "daytona", "--config", configFile(t, map[string]any{
		"api_url": srv.URL(), "api_key": srv.APIKey(),
		"snapshot_id": snap,
	}))
	var res probejson.Result
	c.okJSON(&res, "probe", "cloud", "--company", "acme")
	if !res.OK || res.ImageIdentity.IsZero() || !strings.Contains(res.ImageIdentity.String(), snap) ||
		res.Cleanup == nil || !res.Cleanup.Confirmed || res.Platform.OS != "linux" {
		t.Errorf("daytona probe: ok=%t image=%s cleanup=%+v platform=%s\n%s", res.OK, res.ImageIdentity, res.Cleanup, res.Platform, res.Summary)
	}
	if !res.PlatformQualificationRecorded {
		t.Errorf("daytona probe of a snapshot id did not record a qualification: %v", res.QualificationDiagnostic)
	}
	if n := len(srv.Sandboxes()); n != 0 {
		t.Errorf("the probe left %d Daytona sandboxes", n)
	}
	if strings.Contains(c.all.String(), canaryFree) {
		t.Errorf("the Daytona API key was printed")
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// stageOf returns the stage of res named n, and false if it did not run.
func stageOf(res probejson.Result, n string) (probejson.Stage, bool) {
	for _, s := range res.Stages {
		if s.Name == n {
			return s, true
		}
	}
	return probejson.Stage{}, false
}
