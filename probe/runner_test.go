package probe

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
)

// runnerWorld is a world whose lease manager stops runner tasks through a
// controller and whose prober probes through runners (PRP-8).
func runnerWorld(t *testing.T) (*world, *controller.Controller, controller.Store) {
	t.Helper()
	w := newWorld(t, worldOpts{})
	signer, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	cs := controller.NewMemoryStore()
	c, tasks, err := controller.New(signer, w.lstore, nil, &controller.Options{Store: cs, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	mgr, _ := leasehook.New(leasehook.Sources{Store: w.lstore, Drivers: w.reg, Assignments: w.asg, Tasks: tasks, Secrets: w.secrets.Get})
	w.leases = mgr.(*lease.Manager)
	set := drivers.RunnerSetOf(drivers.RunnerSpec{Binary: "/opt/berth/berth-runner", SHA256: strings.Repeat("cd", 32), Arch: runtime.GOARCH})
	w.prober = newProber(w.sources(), &options{runner: &runnerProbe{controller: c, runners: func() (*drivers.RunnerSet, error) { return set, nil }}})
	return w, c, cs
}

// PRP-8: a runner-based probe takes the platform and version from the
// runner's hello under a probe identity (no task session), releases the
// lease with proof and qualifies as the Exec probe does.
func TestARunnerProbeTakesItsEvidenceFromTheHello(t *testing.T) {
	t.Parallel()
	w, c, cs := runnerWorld(t)
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	v := w.create(t, "runner-probed", img.String())
	res, err := w.prober.Probe(context.Background(), admin, v.ID, Request{Company: "acme", Runner: true})
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, res)
	if !res.OK {
		t.Fatalf("runner probe failed: %s", res.Summary)
	}
	want := []string{stageResolve, stageAcquire, stageRunner, stageIsolation, stageImage, stageRelease, stageQualify}
	if got := stageNames(res); strings.Join(names(got), ",") != strings.Join(names(want), ",") {
		t.Errorf("stages %v, want %v", got, want)
	}
	if res.RunnerVersion == "" || res.Platform.OS != "linux" || res.Platform.Arch == "" {
		t.Errorf("runner version %q, platform %v; want the hello's", res.RunnerVersion, res.Platform)
	}
	if res.Cleanup == nil || !res.Cleanup.Confirmed {
		t.Errorf("cleanup %+v, want confirmed", res.Cleanup)
	}
	if !res.PlatformQualificationRecorded {
		t.Errorf("qualification not recorded: %+v", res.QualificationDiagnostic)
	}
	if !strings.Contains(res.Summary, "under a probe identity") {
		t.Errorf("summary %q does not say the runner ran under a probe identity", res.Summary)
	}
	sessions, err := cs.LeaseSessions(context.Background(), res.LeaseID)
	if err != nil || len(sessions) != 1 || sessions[0].Scope != prp.ScopeProbe {
		t.Fatalf("sessions of the probe's lease = %+v, %v; want one probe session", sessions, err)
	}
	att, err := c.Reattach(context.Background(), admin, sessions[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = att.Start(context.Background(), admin, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"true"}}})
	if !errors.Is(err, prp.ErrScopeDenied) {
		t.Errorf("a task on the probe session = %v, want ErrScopeDenied", err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(c.ConnectedSessions()) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("runners still connected 30 s after the probe: %v", c.ConnectedSessions())
		}
	}
}

// A Prober without a runner configuration fails a runner probe as
// unsupported at acquire, before anything is allocated.
func TestARunnerProbeWithoutARunnerIsUnsupported(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	v := w.create(t, "no-runner", "")
	res, err := w.prober.Probe(context.Background(), admin, v.ID, Request{Company: "acme", Runner: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.Unsupported || len(fakectl.Of(w.fake).Sandboxes()) != 0 {
		t.Errorf("ok %t code %s sandboxes %d, want unsupported and nothing allocated", res.OK, res.Code, len(fakectl.Of(w.fake).Sandboxes()))
	}
}

func names(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
