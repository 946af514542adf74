package probe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
)

func (w *world) createLocal(t *testing.T, dir string) *environment.View {
	t.Helper()
	v, err := w.cat.Create(context.Background(), admin, environment.CreateRequest{
		Name: "this host", Driver: "local", Config: map[string]any{"workdir": dir},
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The local probe reports the host name and the usable working directory,
// measures the platform, and says plainly what it did not validate (PRB-1).
func TestLocalProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := w.createLocal(t, dir)

	res, err := w.prober.Probe(ctx, operator, env.ID, Request{Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Code != reason.OK {
		t.Fatalf("local probe failed: %s", res.Summary)
	}
	host, _ := os.Hostname()
	if res.Hostname != host || res.Cwd != dir || res.Target != "host "+host {
		t.Errorf("hostname %q, cwd %q, target %q; want %q, %q", res.Hostname, res.Cwd, res.Target, host, dir)
	}
	for _, s := range []string{host, dir, env.ID, "usable"} {
		if !strings.Contains(res.Summary, s) {
			t.Errorf("summary lacks %q: %q", s, res.Summary)
		}
	}
	if res.NotValidated != notValidatedNote || !strings.Contains(res.Message, host) || len(res.Message) > 200 {
		t.Errorf("not validated %q, message %q", res.NotValidated, res.Message)
	}
	if diff := cmp.Diff([]string{stageResolve, stageAcquire, stageDetect, stageRelease}, stageNames(res)); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	if res.Platform.OS != "linux" || res.Platform.Arch == "" {
		t.Errorf("platform %q", res.Platform)
	}
	// PRB-6: the result says why nothing was recorded.
	if diagCode(res) != qualify.HostTarget || res.PlatformQualificationRecorded || !strings.Contains(res.QualificationDiagnostic.Message, "no image to qualify") {
		t.Errorf("a host probe's qualification diagnostic: %+v, recorded %v", res.QualificationDiagnostic, res.PlatformQualificationRecorded)
	}
	if c := res.Cleanup; c == nil || !c.Confirmed || c.LeaseStatus != lease.StatusReleased {
		t.Errorf("cleanup %+v", c)
	}
}

// A local probe whose working directory is gone fails at acquire; it is
// not replaced by another directory or host (PRB-5, PRB-8).
func TestLocalProbeMissingWorkdir(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	dir := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := w.createLocal(t, dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	res, err := w.prober.Probe(ctx, admin, env.ID, Request{Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.NotFound || res.Cwd != "" || res.Hostname != "" {
		t.Fatalf("ok=%v code=%s cwd=%q: %s", res.OK, res.Code, res.Cwd, res.Summary)
	}
	if !strings.Contains(res.Summary, env.ID) || !strings.Contains(res.Summary, "acquire") || strings.Contains(res.Summary, notValidatedNote) || res.NotValidated != notValidatedNote {
		t.Errorf("summary %q, not validated %q: want the note apart from the summary", res.Summary, res.NotValidated)
	}
	// The message is one sentence for a person naming the target.
	if m := res.Message; m == "" || len(m) > 200 || !strings.Contains(m, res.Target) || strings.Contains(m, "NOT validate") {
		t.Errorf("message %q", m)
	}
}

// A target that cannot be allocated fails the probe: no other driver, no
// host, is tried, and the failure carries a stable code (PRB-5, PRB-8).
func TestNoFallbackToHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		opts   *fake.Options
		inject func(d *fake.Driver)
		code   string
		stage  string
	}{
		{"provider unreachable", nil, func(d *fake.Driver) { fakectl.Of(d).FailNth("create", 1, drivers.ErrUnreachable) }, reason.Unreachable, stageAcquire},
		{"credentials refused", nil, func(d *fake.Driver) { fakectl.Of(d).FailNth("create", 1, drivers.ErrAuth) }, reason.AuthFailed, stageAcquire},
		{"provider unavailable", &fake.Options{Unavailable: errors.New("switched off")}, func(*fake.Driver) {}, reason.ProviderUnavailable, stageResolve},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{fake: tt.opts})
			img := w.fake.AddImage("registry.fake.test/team/app:v1")
			env := w.create(t, "e", img.String())
			tt.inject(w.fake)
			res := w.probe(t, env.ID, "acme")
			if res.OK || res.Code != tt.code {
				t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
			}
			if st, ok := stageOf(res, tt.stage); !ok || st.OK || st.Code != tt.code {
				t.Errorf("stage %s: %+v", tt.stage, st)
			}
			if st, _ := stageOf(res, stageDetect); !skipped(st) || st.OK || res.Hostname != "" || !res.Platform.IsZero() {
				t.Errorf("something was measured after a failed allocation: %+v", res)
			}
			// The first failure is named; every later stage is skipped,
			// never ok, and the diagnostic names the failure.
			wantSkippedAfter(t, res, tt.stage)
			if diagCode(res) != qualify.ProbeFailed || !strings.Contains(res.QualificationDiagnostic.Message, "stage "+string(tt.stage)) {
				t.Errorf("diagnostic %+v", res.QualificationDiagnostic)
			}
			if res.PlatformQualificationRecorded || len(fakectl.Of(w.fake).Sandboxes()) != 0 {
				t.Errorf("recorded %v, sandboxes %+v", res.PlatformQualificationRecorded, fakectl.Of(w.fake).Sandboxes())
			}
			if !strings.Contains(res.Summary, env.ID) || !strings.Contains(res.Summary, "driver fake") || !strings.Contains(res.Summary, string(tt.code)) {
				t.Errorf("summary %q", res.Summary)
			}
			if st, _ := stageOf(res, tt.stage); st.Duration <= 0 {
				t.Errorf("stage %s has no timing", tt.stage)
			}
		})
	}
}

// No result holds a secret, even when a driver's error quotes one (CFG-3).
func TestResultScrubsSecrets(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	fakectl.Of(w.fake).FailNth("create", 1, errors.New("bad key "+canary+": "+drivers.ErrAuth.Error()))
	res := w.probe(t, env.ID, "acme") // asserts the canary is absent
	if res.OK || !strings.Contains(res.Summary, config.Redacted) {
		t.Errorf("summary %q", res.Summary)
	}
	res, err := w.prober.ProbeDraft(context.Background(), admin, "fake", map[string]any{"api_key": canary, "cpus": 1000}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, res)
}

// A draft probe checks config and reachability, saves nothing and never
// records a qualification (PRB-4).
func TestDraftProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")

	// Issue 25: the request's Progress sees each stage start and end.
	var events []event
	res, err := w.prober.ProbeDraft(ctx, admin, "fake", map[string]any{"image": img.String(), "api_key": canary},
		Request{Progress: func(s Stage, running bool) { events = append(events, event{s, running}) }})
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, res)
	if !res.OK || res.Environment != "" || res.ImageIdentity != img || res.Platform.Arch == "" {
		t.Fatalf("draft probe: %s", res.Summary)
	}
	if len(events) != 2*len(res.Stages) || len(events) == 0 || !events[0].running || events[len(events)-1].Name != res.Stages[len(res.Stages)-1].Name {
		t.Errorf("progress of the draft probe: %d events %+v for %d stages", len(events), events, len(res.Stages))
	}
	if res.PlatformQualificationRecorded || diagCode(res) != qualify.NotSaved {
		t.Errorf("diagnostic %+v", res.QualificationDiagnostic)
	}
	if c := res.Cleanup; c == nil || !c.Confirmed || c.PendingCleanup {
		t.Errorf("cleanup %+v", c)
	}
	// Nothing saved: no environment, no secret, no qualification record.
	envs, err := w.cat.List(ctx, admin, environment.ListFilter{})
	if err != nil || len(envs) != 0 {
		t.Errorf("environments %v, %v", envs, err)
	}
	if n := w.secrets.puts.Load(); n != 0 {
		t.Errorf("%d secrets stored", n)
	}
	// LEASE-2, PRB-4: the sandbox had a write-ahead record while it
	// existed, removed once its destroy was proven: nothing is left.
	if ls, _ := w.lstore.ListLeases(ctx, lease.Filter{}); len(ls) != 0 {
		t.Fatalf("a draft probe with a proven cleanup left lease records %+v", ls)
	}
	if !res.Cleanup.RecordRemoved || res.Cleanup.LeaseStatus != lease.StatusReleased {
		t.Errorf("cleanup %+v; want the record removed after the release", res.Cleanup)
	}
	sbs := fakectl.Of(w.fake).Sandboxes()
	if len(sbs) != 1 || sbs[0].State != drivers.StateDestroyed || sbs[0].Labels["berth.lease"] != res.LeaseID {
		t.Errorf("sandboxes %+v", sbs)
	}

	// An unproven cleanup leaves a pending_cleanup record without the
	// secret field, and the result says so.
	fakectl.Of(w.fake).Inject(fakectl.Fault{Op: "destroy", Err: errors.New("provider busy")})
	res, err = w.prober.ProbeDraft(ctx, admin, "fake", map[string]any{"image": img.String(), "api_key": canary}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, res)
	if c := res.Cleanup; c == nil || c.Confirmed || !c.PendingCleanup || c.RecordRemoved || c.LeaseStatus != lease.StatusPendingCleanup ||
		!strings.Contains(c.Evidence, "pending_cleanup lease record") {
		t.Errorf("unproven draft cleanup %+v", c)
	}
	ls, _ := w.lstore.ListLeases(ctx, lease.Filter{})
	if len(ls) != 1 || ls[0].ID != res.LeaseID || ls[0].Status != lease.StatusPendingCleanup || !ls[0].Draft {
		t.Fatalf("leases after an unproven draft cleanup %+v", ls)
	}
	if _, has := ls[0].Config["api_key"]; has {
		t.Errorf("the pending draft record holds the secret field: %v", ls[0].Config)
	}
	fakectl.Of(w.fake).ClearFaults()

	// An invalid draft fails at resolve with invalid_config and allocates nothing.
	before := fakectl.Of(w.fake).TotalCalls()
	res, err = w.prober.ProbeDraft(ctx, admin, "fake", map[string]any{"cpus": 1000}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.InvalidConfig || !strings.Contains(res.Summary, "cpus") {
		t.Errorf("invalid draft: %s %s", res.Code, res.Summary)
	}
	if fakectl.Of(w.fake).TotalCalls() != before {
		t.Errorf("an invalid draft called the provider")
	}
	// An unknown driver is a failed result too.
	res, err = w.prober.ProbeDraft(ctx, admin, "nope", nil, Request{})
	if err != nil || res.OK || res.Code != reason.InvalidConfig && res.Code != reason.ProviderUnavailable {
		t.Errorf("unknown driver: %+v, %v", res, err)
	}
}

// A draft whose destroy is not confirmed reports it and leaves its lease
// pending cleanup (PRB-3, PRB-4, LEASE-2).
func TestDraftProbeUnconfirmedCleanup(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	fakectl.Of(w.fake).FakeStop(w.nextSandbox(), "unconfirmed")
	res, err := w.prober.ProbeDraft(context.Background(), admin, "fake", nil, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.CleanupFailed || res.Cleanup == nil || !res.Cleanup.PendingCleanup || res.Cleanup.Confirmed {
		t.Fatalf("%+v: %s", res.Cleanup, res.Summary)
	}
	if !strings.Contains(res.Summary, "pending cleanup; a sweep retries it") {
		t.Errorf("summary %q", res.Summary)
	}
	// LEASE-2: the sandbox the provider may still hold has a record the
	// sweep retries.
	ls, _ := w.lstore.ListLeases(context.Background(), lease.Filter{})
	if len(ls) != 1 || ls[0].Status != lease.StatusPendingCleanup {
		t.Errorf("leases %+v", ls)
	}
}

// A probe whose context ends mid-way fails with code timeout, and its
// lease is still released and confirmed (PRB-3, PRB-5).
func TestProbeTimeoutStillCleansUp(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{fake: &fake.Options{Handlers: map[string]fake.HandlerFunc{
		qualify.DetectScript: func(ctx context.Context, _ fake.Invocation) (int, error) {
			<-ctx.Done()
			return -1, ctx.Err()
		},
	}}})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "slow", img.String())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := w.prober.Probe(ctx, admin, env.ID, Request{Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || res.Code != reason.Timeout {
		t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
	}
	if st, _ := stageOf(res, stageDetect); st.OK || st.Code != reason.Timeout {
		t.Errorf("detect stage %+v", st)
	}
	if c := res.Cleanup; c == nil || !c.Confirmed || c.LeaseStatus != lease.StatusReleased {
		t.Errorf("cleanup after the deadline: %+v", c)
	}
	if res.PlatformQualificationRecorded || diagCode(res) != qualify.ProbeFailed || !strings.Contains(res.QualificationDiagnostic.Message, "stage detect") {
		t.Errorf("diagnostic %+v", res.QualificationDiagnostic)
	}
	wantSkippedAfter(t, res, stageDetect)
}

// A start that fails and whose sandbox cannot be removed: the probe fails
// with the start's code and reports the pending cleanup (LEASE-2, PRB-3).
func TestFailedStartPendingCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, worldOpts{})
	img := w.fake.AddImage("registry.fake.test/team/app:v1")
	env := w.create(t, "e", img.String())
	id := w.nextSandbox()
	fakectl.Of(w.fake).FailNth("start", 1, drivers.ErrUnreachable)
	fakectl.Of(w.fake).RefuseStop(id, drivers.ErrUnreachable)

	res := w.probe(t, env.ID, "acme")
	if res.OK || res.Code != reason.Unreachable {
		t.Fatalf("ok=%v code=%s: %s", res.OK, res.Code, res.Summary)
	}
	if c := res.Cleanup; c == nil || c.Confirmed || !c.PendingCleanup || c.LeaseStatus != lease.StatusPendingCleanup {
		t.Fatalf("cleanup %+v", c)
	}
	if !strings.Contains(res.Summary, "cleanup is not confirmed") {
		t.Errorf("summary %q", res.Summary)
	}
	ls, err := w.lstore.ListLeases(ctx, lease.Filter{Environment: env.ID})
	if err != nil || len(ls) != 1 || ls[0].Status != lease.StatusPendingCleanup {
		t.Errorf("leases %+v, %v", ls, err)
	}
	if st, _ := stageOf(res, stageDetect); !skipped(st) || st.OK {
		t.Errorf("detect after a failed start: %+v, want skipped", st)
	}
}

// wantSkippedAfter checks that every stage after failed, but the release
// when it ran, is skipped and not ok.
func wantSkippedAfter(t *testing.T, res *Result, failed string) {
	t.Helper()
	seen := false
	for _, st := range res.Stages {
		switch {
		case st.Name == failed:
			seen = true
		case seen && st.Name == stageRelease && !skipped(st):
		case seen && !skipped(st):
			t.Errorf("stage %s after the failed %s: %+v, want skipped", st.Name, failed, st)
		}
	}
	if !seen {
		t.Errorf("stage %s not in %+v", failed, res.Stages)
	}
}
