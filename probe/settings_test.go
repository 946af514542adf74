package probe

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/instancehook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
)

// settingsWorld is newWorld whose catalog, assignments (and so lease
// manager) and prober's gate read the instance settings of the returned
// service.
func settingsWorld(t *testing.T, o worldOpts) (*world, *instance.Service) {
	t.Helper()
	w := newWorld(t, o)
	hs, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
	svc, reader := hs.(*instance.Service), hr.(instance.Reader)
	opts := &envhook.Options{TestMode: true, Settings: reader}
	w.cat = envhook.NewCatalog(w.envs, w.reg, w.secrets, nil, opts).(*environment.Catalog)
	w.asg = envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), w.envs, w.reg, opts).(*environment.Assignments)
	mgr, _ := leasehook.New(leasehook.Sources{Store: w.lstore, Drivers: w.reg, Assignments: w.asg, Secrets: w.secrets.Get})
	w.leases = mgr.(*lease.Manager)
	src := w.sources()
	src.Gate = envhook.NewGate(w.reg, &envhook.Options{TestMode: true, Settings: reader})
	w.prober = newProber(src, &options{})
	return w, svc
}

func updateSettings(t *testing.T, svc *instance.Service, enable, managed bool) {
	t.Helper()
	if _, err := svc.Update(context.Background(), admin, instance.AnyRevision, func(c *instance.Settings) error {
		c.EnableEnvironments, c.ManagedSandboxOnly = enable, managed
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// nothingLeased fails when the probe left a lease record or made a
// sandbox.
func (w *world) nothingLeased(t *testing.T, what string) {
	t.Helper()
	ls, err := w.lstore.ListLeases(context.Background(), lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 0 || len(fakectl.Of(w.fake).Sandboxes()) != 0 {
		t.Errorf("%s left %d lease records and %d sandboxes", what, len(ls), len(fakectl.Of(w.fake).Sandboxes()))
	}
}

// CFG-9: with environments disabled a probe (saved or draft) is refused
// with an error naming the setting; nothing is measured, leased or
// allocated. Enabled again, the same probe runs.
func TestProbeRefusedWhileEnvironmentsAreDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, svc := settingsWorld(t, worldOpts{})
	v := w.create(t, "box", "")
	updateSettings(t, svc, false, false)

	res, err := w.prober.Probe(ctx, admin, v.ID, Request{Company: "acme"})
	if !errors.Is(err, instance.ErrEnvironmentsDisabled) || errcode.Code(err) != errcode.Unavailable || res != nil {
		t.Errorf("Probe = %+v, %v; want no result and ErrEnvironmentsDisabled", res, err)
	} else if !strings.Contains(err.Error(), "enableEnvironments") || !strings.Contains(err.Error(), v.ID) {
		t.Errorf("Probe error %q does not name the setting and the environment", err)
	}
	res, err = w.prober.ProbeDraft(ctx, admin, "fake", map[string]any{"api_key": canary}, Request{})
	if !errors.Is(err, instance.ErrEnvironmentsDisabled) || res != nil {
		t.Errorf("ProbeDraft = %+v, %v; want no result and ErrEnvironmentsDisabled", res, err)
	}
	if err != nil && strings.Contains(err.Error(), canary) {
		t.Errorf("ProbeDraft error holds the pasted secret: %v", err)
	}
	// Authorization still comes first.
	if _, err := w.prober.Probe(ctx, agent, v.ID, Request{Company: "acme"}); errors.Is(err, instance.ErrEnvironmentsDisabled) || err == nil {
		t.Errorf("Probe as an agent = %v, want the authorization refusal", err)
	}
	w.nothingLeased(t, "refused probes")

	updateSettings(t, svc, true, false)
	if res := w.probe(t, v.ID, "acme"); !res.OK {
		t.Errorf("Probe after enabling failed: %s %s", res.Code, res.Summary)
	}
}

// CFG-9, CAP-3: with managed-sandbox-only on, a probe of a host target
// (local, saved or draft) fails at the resolve stage with the code
// managed_sandbox_only and leases nothing; a sandbox target probes.
func TestProbeOfAHostTargetUnderManagedSandboxOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, svc := settingsWorld(t, worldOpts{fake: &fake.Options{Isolation: drivers.IsolationContainer}})
	host, err := w.cat.Create(ctx, admin, environment.CreateRequest{Name: "this host", Driver: "local", Config: map[string]any{"workdir": t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	box := w.create(t, "box", "")
	updateSettings(t, svc, true, true)

	check := func(what string, res *Result, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		first, _ := (&run{res: res}).failedStage()
		if res.OK || res.Code != reason.ManagedSandboxOnly || first.Name != stageResolve || !strings.Contains(first.Error, "managed_sandbox_only") {
			t.Errorf("%s = ok %v code %s, failed stage %s (%s); want managed_sandbox_only at resolve", what, res.OK, res.Code, first.Name, first.Error)
		}
		if reason.Code(res.Code) != errcode.Unavailable {
			t.Errorf("%s: code %s maps to %v, want unavailable", what, res.Code, reason.Code(res.Code))
		}
	}
	res, err := w.prober.Probe(ctx, admin, host.ID, Request{Company: "acme"})
	check("Probe of the host", res, err)
	res, err = w.prober.ProbeDraft(ctx, admin, "local", map[string]any{"workdir": t.TempDir()}, Request{})
	check("ProbeDraft of local", res, err)
	w.nothingLeased(t, "refused host probes")

	// The host environment stays readable; the sandbox probes.
	if v, err := w.cat.Get(ctx, board, host.ID); err != nil || !strings.Contains(v.Unavailable, "managed_sandbox_only") {
		t.Errorf("Get(host) = %+v, %v", v, err)
	}
	if res := w.probe(t, box.ID, "acme"); !res.OK {
		t.Errorf("Probe of the sandbox failed: %s %s", res.Code, res.Summary)
	}
}

// Issue 56: managed-sandbox-only means a minimum of container, so a probe
// of a sandbox target that declares no isolation (the fake's default),
// saved or draft, fails at the resolve stage with isolation_below_minimum
// before the provider is measured or anything leased, and the saved
// probe's error names the environment and the setting.
func TestProbeBelowTheManagedMinimum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, svc := settingsWorld(t, worldOpts{})
	box := w.create(t, "box", "")
	updateSettings(t, svc, true, true)
	for _, tc := range []struct {
		what, target string
		probe        func() (*Result, error)
	}{
		{"Probe of box", `Environment "box"`, func() (*Result, error) { return w.prober.Probe(ctx, admin, box.ID, Request{Company: "acme"}) }},
		{"ProbeDraft of fake", "driver fake", func() (*Result, error) { return w.prober.ProbeDraft(ctx, admin, "fake", map[string]any{}, Request{}) }},
	} {
		res, err := tc.probe()
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		first, _ := (&run{res: res}).failedStage()
		if res.OK || res.Code != reason.IsolationBelowMinimum || first.Name != stageResolve {
			t.Errorf("%s = ok %v code %s at %s (%s); want isolation_below_minimum at resolve", tc.what, res.OK, res.Code, first.Name, first.Error)
		}
		for _, want := range []string{tc.target, "minimum container", "enableManagedSandboxOnly"} {
			if !strings.Contains(first.Error, want) {
				t.Errorf("%s: %q does not say %q", tc.what, first.Error, want)
			}
		}
	}
	w.nothingLeased(t, "probes below the minimum")
}
