package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/lease"
)

var bg = context.Background()

func TestAcquireExecRelease(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	h := w.acquire(lease.Ephemeral, "run-1")
	l := w.get(h.ID())
	if l.Status != lease.StatusActive || l.ProviderLeaseID != h.SandboxID() || l.Provider != "fake" {
		t.Fatalf("lease after acquire: status %s, provider %s/%s; want active fake/%s", l.Status, l.Provider, l.ProviderLeaseID, h.SandboxID())
	}
	wantLabels := map[string]string{"berth.instance": "test-instance", "berth.environment": "env-1", "berth.lease": h.ID()}
	if diff := cmp.Diff(wantLabels, fakectl.Of(w.fk).Sandboxes()[0].Labels); diff != "" {
		t.Errorf("provider labels (-want +got):\n%s", diff)
	}
	if !l.ExpiresAt.Equal(t0.Add(leaseTTL)) || l.Uses != 1 || l.Fingerprint == "" {
		t.Errorf("lease: expires %s uses %d fingerprint %q", l.ExpiresAt, l.Uses, l.Fingerprint)
	}
	res, err := h.Exec(bg, lease.Command{Argv: []string{"echo", "hi"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "hi" {
		t.Fatalf("Exec: %v, %v", res, err)
	}
	rel, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rel.Status != lease.StatusReleased || rel.Cleanup != "confirmed" || rel.ReleasedAt.IsZero() || rel.CleanupEvidence == "" {
		t.Errorf("released lease: %+v", rel)
	}
	if st := w.state(l.ProviderLeaseID); st != drivers.StateDestroyed {
		t.Errorf("sandbox state %s, want destroyed", st)
	}
	again, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || again.Status != lease.StatusReleased {
		t.Errorf("second Release: %v, %v; want the released lease", again, err)
	}
}

// writeAheadDriver checks, when asked to create, that the store already
// holds a starting record for the lease (LEASE-2), and reports its claim.
type writeAheadDriver struct {
	*fake.Driver
	store   lease.Store
	t       *testing.T
	claimed chan time.Time
}

func (d writeAheadDriver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	l, err := d.store.GetLease(ctx, req.LeaseID)
	if err != nil {
		d.t.Errorf("driver asked to create before the lease record exists: %v", err)
	} else {
		if l.Status != lease.StatusStarting || l.ProviderLeaseID != "" {
			d.t.Errorf("record before create: status %s, pid %q; want starting, none", l.Status, l.ProviderLeaseID)
		}
		d.claimed <- l.ClaimedUntil
	}
	alloc := req.Allocated
	req.Allocated = func(actx context.Context, id string) error {
		err := alloc(actx, id)
		if l, gerr := d.store.GetLease(ctx, req.LeaseID); gerr != nil || l.ProviderLeaseID != id {
			d.t.Errorf("provider lease id %s not recorded as soon as allocated: %v, %v", id, l, gerr)
		}
		return err
	}
	return d.Driver.Acquire(ctx, cfg, req)
}

func TestWriteAheadAndBudgetPrecedence(t *testing.T) {
	t.Parallel()
	// LEASE-2: the record exists before create and gets the provider id as
	// soon as it is allocated. LEASE-3: the budget is the request's, else the
	// environment's startup_timeout knob, else the provider's, else the
	// manager default; it shows in the acquisition's claim.
	tests := []struct {
		name       string
		reqBudget  time.Duration
		knob       string
		provider   time.Duration
		wantBudget time.Duration
	}{
		{"request budget wins", 3 * time.Minute, "2m", 4 * time.Minute, 3 * time.Minute},
		{"config knob", 0, "2m", 4 * time.Minute, 2 * time.Minute},
		{"provider declared", 0, "", 4 * time.Minute, 4 * time.Minute},
		{"manager default", 0, "", 0, 7 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			claimed := make(chan time.Time, 1)
			w := newWorld(t, worldOpts{
				startupBudget: tt.provider,
				wrap: func(fk *fake.Driver, s lease.Store) drivers.Driver {
					return writeAheadDriver{Driver: fk, store: s, t: t, claimed: claimed}
				},
				options: func(o *mopts) { knobs(o, func(k *leasetune.Knobs) { k.StartupBudget = 7 * time.Minute }) },
			})
			raw := map[string]any{}
			if tt.knob != "" {
				raw["startup_timeout"] = tt.knob
			}
			cfg, err := w.fk.Schema().Normalize(raw)
			if err != nil {
				t.Fatal(err)
			}
			w.env.Config = cfg
			req := w.req(lease.Ephemeral, "r")
			req.Budget = tt.reqBudget
			if _, err := w.m.Acquire(bg, op, req); err != nil {
				t.Fatal(err)
			}
			if got := (<-claimed).Sub(t0); got != tt.wantBudget+claimGrace {
				t.Errorf("claim of the starting record: %s, want budget %s + grace %s", got, tt.wantBudget, claimGrace)
			}
		})
	}
}

func TestRejectedInsertCreatesNothing(t *testing.T) {
	t.Parallel()
	// LEASE-2: a refused write-ahead record means no create at all.
	fs := &failingStore{Store: lease.NewMemoryStore()}
	fs.failInsert.Store(true)
	w := newWorld(t, worldOpts{store: fs})
	_, err := w.m.Acquire(bg, op, w.req(lease.Ephemeral, "r"))
	if !errors.Is(err, errStoreDown) || !strings.Contains(err.Error(), "nothing was created") {
		t.Errorf("Acquire: %v, want the store error saying nothing was created", err)
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != 0 {
		t.Errorf("provider create called %d times, want 0", n)
	}
}

func TestAcquireRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fake    *fake.Options
		mod     func(*world, *lease.AcquireRequest)
		want    error
		mention string
	}{
		{"reusable policy needs the reuse capability (LEASE-4, CAP-4)", &fake.Options{Undeclared: drivers.NewSet(drivers.CapReuse)},
			func(w *world, r *lease.AcquireRequest) { r.Policy = lease.ReuseByEnvironment }, drivers.ErrUnsupported, "reuse"},
		{"a required capability the driver lacks", &fake.Options{Undeclared: drivers.NewSet(drivers.CapTerminal)},
			func(w *world, r *lease.AcquireRequest) { r.Required = drivers.NewSet(drivers.CapTerminal) }, drivers.ErrUnsupported, "terminal"},
		{"archived environment", nil,
			func(w *world, r *lease.AcquireRequest) {
				e := *w.env
				e.Status = environment.StatusArchived
				w.save(&e)
			}, drivers.ErrUnavailable, "archived"},
		{"unregistered driver", nil,
			func(w *world, r *lease.AcquireRequest) { e := *w.env; e.Driver = "nope"; w.save(&e) }, drivers.ErrUnavailable, "nope"},
		{"unavailable driver", &fake.Options{Unavailable: errors.New("disabled")}, nil, drivers.ErrUnavailable, "disabled"},
		{"no company", nil, func(w *world, r *lease.AcquireRequest) { r.Company = "" }, errcode.ErrInvalid, "company"},
		{"unknown policy", nil, func(w *world, r *lease.AcquireRequest) { r.Policy = "forever" }, errcode.ErrInvalid, "forever"},
		{"a secret value instead of a reference (CFG-3)", nil,
			func(w *world, r *lease.AcquireRequest) {
				e := *w.env
				e.Config = e.Config.Clone()
				e.Config["api_key"] = "pasted-secret"
				w.save(&e)
			}, config.ErrInvalid, "api_key"},
		{"an unresolvable secret reference", nil,
			func(w *world, r *lease.AcquireRequest) {
				e := *w.env
				e.Config = e.Config.Clone()
				e.Config["api_key"] = config.SecretRef{ID: "missing", Version: 1}
				w.save(&e)
			}, nil, "api_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{fake: tt.fake})
			req := w.req(lease.Ephemeral, "r")
			if tt.mod != nil {
				tt.mod(w, &req)
			}
			_, err := w.m.Acquire(bg, op, req)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Acquire: %v; want an error wrapping %v that mentions %q", err, tt.want, tt.mention)
			}
			if strings.Contains(err.Error(), "pasted-secret") {
				t.Errorf("error leaks the secret: %v", err)
			}
			if n := fakectl.Of(w.fk).TotalCalls(); n != 0 {
				t.Errorf("refused acquisition made %d provider calls", n)
			}
			if ls, _ := w.store.ListLeases(bg, lease.Filter{}); len(ls) != 0 {
				t.Errorf("refused acquisition left %d lease records", len(ls))
			}
		})
	}
}

func TestSameRunIsIdempotent(t *testing.T) {
	t.Parallel()
	// LEASE-8: the same company, run and environment get the same lease.
	for _, p := range []lease.Policy{lease.Ephemeral, lease.RetainOnFailure, lease.ReuseByEnvironment, lease.ReuseByWorkspace} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldOpts{})
			h1 := w.acquire(p, "run-1")
			h2 := w.acquire(p, "run-1")
			if h1.ID() != h2.ID() || h1.SandboxID() != h2.SandboxID() {
				t.Errorf("second acquire in the run: lease %s/%s, want %s/%s", h2.ID(), h2.SandboxID(), h1.ID(), h1.SandboxID())
			}
			if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
				t.Errorf("creates = %d, want 1", n)
			}
			h3 := w.acquire(p, "run-2")
			if lease.Reusable(p) {
				if h3.ID() != h1.ID() {
					t.Errorf("reusable lease not shared by another run: %s vs %s", h3.ID(), h1.ID())
				}
			} else if h3.ID() == h1.ID() {
				t.Errorf("another run got the same ephemeral lease %s", h3.ID())
			}
			// After release, the run gets a fresh lease.
			if !lease.Reusable(p) {
				if _, err := h1.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
					t.Fatal(err)
				}
				if h4 := w.acquire(p, "run-1"); h4.ID() == h1.ID() {
					t.Errorf("released lease %s returned again", h4.ID())
				}
			}
		})
	}
}

func TestConcurrentAcquisitionsOfOneReuseKeyMakeOneSandbox(t *testing.T) {
	t.Parallel()
	// LEASE-8, LEASE-10: 50 concurrent acquisitions through two managers
	// sharing one store make one sandbox.
	w := newWorld(t, worldOpts{})
	managers := []*lease.Manager{w.m, w.newManager(nil)}
	const n = 50
	ids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var dones []<-chan struct{}
	for i := range n {
		dones = append(dones, inBackground(func() {
			<-start
			h, err := managers[i%2].Acquire(bg, op, w.req(lease.ReuseByEnvironment, "run-"+string(rune('a'+i%26))))
			errs[i] = err
			if err == nil {
				ids[i] = h.ID()
			}
		}))
	}
	close(start)
	for _, d := range dones {
		<-d
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("acquisition %d: %v", i, err)
		}
	}
	if got := slices.Compact(slices.Sorted(slices.Values(ids))); len(got) != 1 {
		t.Errorf("leases handed out: %v, want one", got)
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
		t.Errorf("provider creates = %d, want 1", n)
	}
	if got := w.liveSandboxes(); len(got) != 1 {
		t.Errorf("sandboxes at the provider: %v, want one", got)
	}
}

func TestSecretsAreReferencesOnTheRecord(t *testing.T) {
	t.Parallel()
	// CFG-3: the record keeps the reference; cleanup resolves it again.
	w := newWorld(t, worldOpts{fake: &fake.Options{APIKey: "s3cret-value"},
		config: map[string]any{"api_key": map[string]any{"$secret": "fake-key", "version": 3}}})
	h := w.acquire(lease.Ephemeral, "r")
	l := w.get(h.ID())
	if ref, ok := l.Config.SecretRef("api_key"); !ok || ref.ID != "fake-key" {
		t.Errorf("recorded api_key = %v, want the secret reference", l.Config["api_key"])
	}
	before := w.secretLookups.Load()
	fakectl.Of(w.fk).FakeStop(l.ProviderLeaseID, "unconfirmed")
	if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); !errors.Is(err, lease.ErrCleanupPending) {
		t.Fatalf("Release: %v, want ErrCleanupPending", err)
	}
	fakectl.Of(w.fk).ClearFaults()
	rep, err := w.m.Sweep(bg, op)
	if err != nil || rep.CleanedUp != 1 {
		t.Fatalf("Sweep: %+v, %v; want one cleanup", rep, err)
	}
	if w.secretLookups.Load() == before {
		t.Error("cleanup did not resolve the secret reference again")
	}
	all, _ := w.store.ListLeases(bg, lease.Filter{})
	for _, l := range all {
		for k, v := range l.Config {
			if s, ok := v.(string); ok && strings.Contains(s, "s3cret") {
				t.Errorf("lease %s config field %s holds the secret value", l.ID, k)
			}
		}
		if strings.Contains(l.FailureReason+l.CleanupEvidence, "s3cret") {
			t.Errorf("lease %s reasons leak the secret", l.ID)
		}
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	// CFG-7: blast-radius counts for the catalog.
	w := newWorld(t, worldOpts{})
	w.acquire(lease.Ephemeral, "a")
	reusable := w.acquire(lease.ReuseByEnvironment, "b")
	pending := w.acquire(lease.Ephemeral, "c")
	fakectl.Of(w.fk).RefuseStop(pending.SandboxID(), nil)
	if _, err := pending.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); !errors.Is(err, lease.ErrCleanupPending) {
		t.Fatalf("Release: %v", err)
	}
	if _, err := reusable.Release(bg, lease.ReleaseOptions{Disposition: lease.Stop}); err != nil {
		t.Fatal(err)
	}
	// The hook NewManager returns for the catalog (any manager over the
	// store answers alike).
	_, usage := newManagerWith(w.store, w.reg, w.asg, nil, w.options())
	if other, err := usage.EnvironmentUsage(bg, "env-2"); err != nil || !cmp.Equal(other, environment.Usage{}) {
		t.Errorf("EnvironmentUsage(other env) = %+v, %v, want zero", other, err)
	}
	eu, err := usage.EnvironmentUsage(bg, "env-1")
	if err != nil {
		t.Fatal(err)
	}
	refIDs := func(rs []environment.Reference) []string {
		var out []string
		for _, r := range rs {
			if r.Kind != "lease" || r.Company != "acme" || r.Detail == "" {
				t.Errorf("reference %+v", r)
			}
			out = append(out, r.ID)
		}
		return out
	}
	if diff := cmp.Diff([][]string{{"L1"}, {reusable.ID()}, {pending.ID()}},
		[][]string{refIDs(eu.ActiveLeases), refIDs(eu.ReusableLeases), refIDs(eu.PendingCleanupLeases)}); diff != "" {
		t.Errorf("EnvironmentUsage active/reusable/pending (-want +got):\n%s", diff)
	}
}

// silentDriver never reports the allocation, as a host driver may.
type silentDriver struct{ *fake.Driver }

func (d silentDriver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	req.Allocated = nil
	return d.Driver.Acquire(ctx, cfg, req)
}

func TestProviderIDRecordedWithoutAllocatedCallback(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{wrap: func(fk *fake.Driver, _ lease.Store) drivers.Driver { return silentDriver{fk} }})
	h := w.acquire(lease.Ephemeral, "r")
	if l := w.get(h.ID()); l.ProviderLeaseID != h.SandboxID() || l.ProviderLeaseID == "" {
		t.Errorf("recorded provider lease id %q, want %q", l.ProviderLeaseID, h.SandboxID())
	}
}

func TestAcquireThroughAScope(t *testing.T) {
	t.Parallel()
	// ASG-1, ASG-4: through a scope the manager resolves the binding from
	// the store; the lease is for the bound environment and the scope's
	// company, and a request for another company is refused.
	w := newWorld(t, worldOpts{})
	if _, err := w.asg.Set(bg, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws", Company: "acme"}, EnvironmentID: w.env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	scope := &authz.Scope{Company: "acme", Workspace: "ws"}
	h, err := w.m.Acquire(bg, op, lease.AcquireRequest{Scope: scope, Run: "r"})
	if err != nil {
		t.Fatalf("Acquire through a scope: %v", err)
	}
	if l := h.Lease(); l.Company != "acme" || l.Environment != w.env.ID || l.Workspace != "ws" {
		t.Errorf("lease for %s/%s in %q, want acme/%s in ws", l.Company, l.Environment, l.Workspace, w.env.ID)
	}
	if _, err := w.m.Acquire(bg, op, lease.AcquireRequest{Scope: scope, Company: "evil", Run: "r3"}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("scope of acme for company evil: %v, want errcode.ErrInvalid", err)
	}
	if _, err := w.m.Acquire(bg, op, lease.AcquireRequest{Scope: scope, EnvironmentID: w.env.ID, Run: "r4"}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("scope and id: %v, want errcode.ErrInvalid", err)
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
		t.Errorf("creates = %d, want 1", n)
	}
}

func TestReuseDoesNotOverwriteAnotherManagersClaim(t *testing.T) {
	t.Parallel()
	// LEASE-8, LEASE-10: recording another use of a live lease must not
	// write back a snapshot that carries another manager's claim; that
	// manager's own update would then be stale and its claim would stay.
	w := newWorld(t, worldOpts{})
	h := w.acquire(lease.ReuseByEnvironment, "r1")
	now := w.clk.Now()
	claimed, err := w.store.ClaimLease(bg, h.ID(), "other-replica#1", now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Acquire(bg, op, w.req(lease.ReuseByEnvironment, "r2")); err != nil {
		t.Fatal(err)
	}
	if got := w.get(h.ID()); got.Version != claimed.Version {
		t.Fatalf("the lease was written while another manager held its claim (version %d, want %d)", got.Version, claimed.Version)
	}
	done := lease.Clone(claimed)
	done.ClaimedBy, done.ClaimedUntil = "", time.Time{}
	if err := w.store.UpdateLease(bg, done); err != nil {
		t.Fatalf("the claimant's update failed: %v", err)
	}
}

func TestDraftLeases(t *testing.T) {
	t.Parallel()
	// LEASE-2, PRB-4: a draft acquisition (an unsaved config with a pasted
	// secret) still gets a write-ahead record, and the record never holds
	// the secret; drafts are ephemeral only, and outside a draft a pasted
	// secret is refused.
	w := newWorld(t, worldOpts{})
	const pasted = "draft-secret-5e1"
	cfg, err := w.fk.Schema().Normalize(map[string]any{"api_key": pasted})
	if err != nil {
		t.Fatal(err)
	}
	draft := func(req lease.AcquireRequest) lease.AcquireRequest { return lease.Draft(req, w.fk.Name(), cfg) }
	h, err := w.m.Acquire(bg, op, draft(lease.AcquireRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	rec := w.get(h.ID())
	if rec.ProviderLeaseID != h.SandboxID() {
		t.Errorf("record points at %q, sandbox is %q", rec.ProviderLeaseID, h.SandboxID())
	}
	if _, has := rec.Config["api_key"]; has {
		t.Errorf("the draft record holds the secret field: %v", rec.Config)
	}
	if l, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil || l.Cleanup != "confirmed" {
		t.Fatalf("release: %+v, %v", l, err)
	}
	if _, err := w.m.Acquire(bg, op, draft(lease.AcquireRequest{Policy: lease.ReuseByEnvironment})); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("reusable draft: %v, want errcode.ErrInvalid", err)
	}
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	if _, err := w.m.Acquire(bg, agent, draft(lease.AcquireRequest{})); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("draft by an agent: %v, want ErrDenied (PRB-7)", err)
	}
	w.save(&environment.Environment{ID: "pasted", Name: "pasted", Driver: w.fk.Name(), Status: environment.StatusActive, Config: cfg, Revision: 1})
	_, err = w.m.Acquire(bg, op, lease.AcquireRequest{Company: "acme", EnvironmentID: "pasted"})
	if !errors.Is(err, config.ErrInvalid) || strings.Contains(err.Error(), pasted) {
		t.Errorf("pasted secret outside a draft: %v, want config.ErrInvalid without the value", err)
	}
}
