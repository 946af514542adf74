package probe

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// putCounter is a SecretStore that counts the secrets put into it.
type putCounter struct {
	environment.SecretStore
	puts atomic.Int64
}

func (c *putCounter) Put(ctx context.Context, owner, field, value string) (config.SecretRef, error) {
	c.puts.Add(1)
	return c.SecretStore.Put(ctx, owner, field, value)
}

// canary is the api_key pasted into fake configs; no result may contain it.
const canary = "canary-SECRET-5a1b2c3d"

var (
	admin    = authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	operator = authz.Principal{ID: "op", Role: authz.RoleLocalOperator}
	board    = authz.Principal{ID: "bob", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	agent    = authz.Principal{ID: "agent-7", Role: authz.RoleAgent, Companies: []string{"acme"}}
)

// world is one host composition over a fake and the local driver.
type world struct {
	envs    environment.Store
	fake    *fake.Driver
	reg     *drivers.Registry
	secrets *putCounter
	cat     *environment.Catalog
	leases  *lease.Manager
	lstore  lease.Store
	quals   qualification.Store
	asg     *environment.Assignments
	prober  *Prober
	stages  chan event // progress events, when asked for
	// progress is the Request.Progress of w.probe, when asked for.
	progress func(Stage, bool)
}

type worldOpts struct {
	fake     *fake.Options
	progress bool
}

func newWorld(t *testing.T, o worldOpts) *world {
	t.Helper()
	w := &world{fake: fake.New(o.fake)}
	w.reg = drivers.NewRegistry(w.fake, local.New(nil))
	w.secrets = &putCounter{SecretStore: envhook.NewMemorySecretStore().(environment.SecretStore)}
	envs := envhook.NewMemoryStore().(environment.Store)
	w.cat = envhook.NewCatalog(envs, w.reg, w.secrets, nil, &envhook.Options{TestMode: true}).(*environment.Catalog)
	w.lstore = lease.NewMemoryStore()
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, w.reg, &envhook.Options{TestMode: true}).(*environment.Assignments)
	w.asg = asg
	mgr, _ := leasehook.New(leasehook.Sources{Store: w.lstore, Drivers: w.reg, Assignments: asg, Secrets: w.secrets.Get})
	w.leases = mgr.(*lease.Manager)
	w.quals = qualification.NewMemoryStore()
	if o.progress {
		w.stages = make(chan event, 64)
		w.progress = func(s Stage, running bool) { w.stages <- event{s, running} }
	}
	w.envs = envs
	w.prober = newProber(w.sources(), &options{})
	return w
}

// sources are the world's Sources for newProber (in test mode).
func (w *world) sources() sources {
	return testSources(w.cat, w.envs, w.reg, w.leases, w.quals, true)
}

// testSources are the Sources of a test prober over cat, envs, reg,
// leases and quals, with a gate of testMode.
func testSources(cat *environment.Catalog, envs environment.Store, reg *drivers.Registry, leases *lease.Manager, quals qualification.Store, testMode bool) sources {
	return sources{Catalog: cat, Environments: envs, Drivers: reg, Leases: leases, Qualifications: quals,
		Gate: envhook.NewGate(reg, &envhook.Options{TestMode: testMode})}
}

// create saves a fake environment with image (and the canary api_key).
func (w *world) create(t *testing.T, name, image string) *environment.View {
	t.Helper()
	cfg := map[string]any{"api_key": canary}
	if image != "" {
		cfg["image"] = image
	}
	v, err := w.cat.Create(context.Background(), admin, environment.CreateRequest{Name: name, Driver: "fake", Config: cfg})
	if err != nil {
		t.Fatalf("create %q: %v", name, err)
	}
	return v
}

// update replaces the environment's config fields in set (others kept as
// the full view shows them) and/or renames it.
func (w *world) update(t *testing.T, id string, set map[string]any, rename string) {
	t.Helper()
	ctx := context.Background()
	v, err := w.cat.Get(ctx, admin, id)
	if err != nil {
		t.Fatal(err)
	}
	req := environment.UpdateRequest{BaseRevision: v.Revision}
	if set != nil {
		cfg := map[string]any{}
		for k, val := range v.Config {
			cfg[k] = val
		}
		for k, val := range set {
			cfg[k] = val
		}
		req.Config = cfg
	}
	if rename != "" {
		req.Name = &rename
	}
	if _, err := w.cat.Update(ctx, admin, id, req); err != nil {
		t.Fatalf("update %s: %v", id, err)
	}
}

func (w *world) probe(t *testing.T, id, company string) *Result {
	t.Helper()
	res, err := w.prober.Probe(context.Background(), admin, id, Request{Company: company, Progress: w.progress})
	if err != nil {
		t.Fatalf("Probe(%s): %v", id, err)
	}
	assertNoSecret(t, res)
	return res
}

// nextSandbox is the provider id the fake gives its next sandbox.
func (w *world) nextSandbox() string {
	return "fake-" + strconv.Itoa(len(fakectl.Of(w.fake).Sandboxes())+1)
}

// assertNoSecret fails when the result's JSON or summary holds the canary.
func assertNoSecret(t *testing.T, res *Result) {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), canary) || strings.Contains(res.Summary, canary) {
		t.Fatalf("result contains the secret canary: %s", b)
	}
}

func stageNames(res *Result) []string {
	var out []string
	for _, s := range res.Stages {
		out = append(out, s.Name)
	}
	return out
}

func diagCode(res *Result) string {
	if res.QualificationDiagnostic == nil {
		return ""
	}
	return res.QualificationDiagnostic.Code
}

// event is one Request.Progress call.
type event struct {
	Stage
	running bool
}

// stageOf returns the stage of res named n, and false if it did not run.
func stageOf(res *Result, n string) (Stage, bool) {
	for _, s := range res.Stages {
		if s.Name == n {
			return s, true
		}
	}
	return Stage{}, false
}

// skipped reports whether st did not run because an earlier stage failed.
func skipped(st Stage) bool { return !st.OK && st.Code == "" }
