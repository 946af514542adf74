package lease_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// The four roles of the authorization tables. The board member and the
// agent hold a grant for acme only.
var (
	roleAdmin = authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	roleOp    = authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	roleBoard = authz.Principal{ID: "bea", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	roleAgent = authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	roles     = []authz.Principal{roleAdmin, roleOp, roleBoard, roleAgent}
)

// authWorld saves four environments: "own" bound to acme's workspace
// ws-a, "other" bound to globex's workspace ws-g, "unbound", and
// "archived" (bound to acme's ws-arch, then archived).
func authWorld(t *testing.T) *world {
	w := newWorld(t, worldOpts{})
	for _, id := range []string{"own", "other", "unbound", "archived"} {
		e := *w.env
		e.ID, e.Name = id, id+" box"
		w.save(&e)
	}
	for ws, b := range map[string][2]string{"ws-a": {"acme", "own"}, "ws-g": {"globex", "other"}, "ws-arch": {"acme", "archived"}} {
		if _, err := w.asg.Set(bg, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: ws, Company: b[0]}, EnvironmentID: b[1]}, 0); err != nil {
			t.Fatal(err)
		}
	}
	arch := *w.env
	arch.ID, arch.Name, arch.Status = "archived", "archived box", environment.StatusArchived
	w.save(&arch)
	return w
}

// TestAcquireAuthorization is the AUTH-1 / ASG-3 table through the library:
// roles x (own company, other company, bound, unbound, archived), by
// environment id and through a scope. Only instance admins and local
// operators lease by id; agents lease through a binding of their company;
// board members never lease; nobody leases an environment bound to another
// company; and no refusal names another tenant's company or environment.
func TestAcquireAuthorization(t *testing.T) {
	t.Parallel()
	byID := func(env, company string) lease.AcquireRequest {
		return lease.AcquireRequest{EnvironmentID: env, Company: company}
	}
	byScope := func(company, ws string) lease.AcquireRequest {
		return lease.AcquireRequest{Scope: &authz.Scope{Company: company, Workspace: ws}}
	}
	type want struct {
		ok   bool
		errs []error // each must be wrapped when !ok
	}
	allow, denied := want{ok: true}, want{errs: []error{errcode.ErrDenied}}
	archived := want{errs: []error{drivers.ErrUnavailable, environment.ErrArchived}}
	noBinding := want{errs: []error{environment.ErrNoBinding}}
	tests := []struct {
		name string
		req  lease.AcquireRequest
		// per role: admin, operator, board member, agent
		want [4]want
		env  string // the environment leased when allowed
	}{
		{"own company, bound, through its scope", byScope("acme", "ws-a"), [4]want{allow, allow, denied, allow}, "own"},
		{"own company, bound, by id", byID("own", "acme"), [4]want{allow, allow, denied, denied}, "own"},
		{"own company, unbound, by id", byID("unbound", "acme"), [4]want{allow, allow, denied, denied}, "unbound"},
		{"own company, a scope without a binding", byScope("acme", "ws-none"), [4]want{noBinding, noBinding, denied, noBinding}, ""},
		{"own company, archived, by id", byID("archived", "acme"), [4]want{archived, archived, denied, denied}, ""},
		{"own company, archived, through its scope", byScope("acme", "ws-arch"), [4]want{
			{errs: []error{environment.ErrArchived}}, {errs: []error{environment.ErrArchived}}, denied, {errs: []error{environment.ErrArchived}}}, ""},
		{"own company, another company's binding key: keys are per company, so nothing is bound", byScope("acme", "ws-g"), [4]want{noBinding, noBinding, denied, noBinding}, ""},
		{"own company, another company's environment by id", byID("other", "acme"), [4]want{denied, denied, denied, denied}, ""},
		{"other company, its own scope", byScope("globex", "ws-g"), [4]want{allow, allow, denied, denied}, "other"},
		{"other company, an unbound environment by id", byID("unbound", "globex"), [4]want{allow, allow, denied, denied}, "unbound"},
	}
	for _, tc := range tests {
		for i, p := range roles {
			t.Run(tc.name+"/"+string(p.Role), func(t *testing.T) {
				t.Parallel()
				w := authWorld(t)
				req := tc.req
				req.Run = "r"
				h, err := w.m.Acquire(bg, p, req)
				wt := tc.want[i]
				if wt.ok {
					if err != nil {
						t.Fatalf("Acquire: %v, want allowed", err)
					}
					if l := h.Lease(); l.Environment != tc.env {
						t.Errorf("leased %s, want %s", l.Environment, tc.env)
					}
					return
				}
				if err == nil {
					t.Fatalf("Acquire leased %s, want refused", h.Lease().Environment)
				}
				for _, e := range wt.errs {
					if !errors.Is(err, e) {
						t.Errorf("Acquire: %v, want it to wrap %v", err, e)
					}
				}
				tenant := req.Company
				if req.Scope != nil {
					tenant = req.Scope.Company
				}
				wantNoTenantLeak(t, err, tenant, req.EnvironmentID)
				if n := fakectl.Of(w.fk).TotalCalls(); n != 0 {
					t.Errorf("a refused acquisition made %d provider calls", n)
				}
			})
		}
	}
}

// wantNoTenantLeak fails when err names a company other than the caller's
// or an environment the caller did not name.
func wantNoTenantLeak(t *testing.T, err error, company, named string) {
	t.Helper()
	msg := err.Error()
	for _, c := range []string{"acme", "globex"} {
		if c != company && strings.Contains(msg, c) {
			t.Errorf("refusal %q names another company (%s)", msg, c)
		}
	}
	for _, id := range []string{"own", "other", "unbound", "archived"} {
		if id != named && strings.Contains(msg, `environment `+id) {
			t.Errorf("refusal %q names environment %s, which the caller did not name", msg, id)
		}
	}
}

// TestReleaseAndReadAuthorization: a lease is released or read by instance
// admins and local operators, and by principals of its company that may
// (agents release and read; board members read only), redacted for all but
// admins and operators (CFG-2); another company's lease is refused without
// naming it; a sweep is an operator action.
func TestReleaseAndReadAuthorization(t *testing.T) {
	t.Parallel()
	type rights struct{ release, read, full bool }
	for _, tc := range []struct {
		company string
		want    [4]rights // admin, operator, board member, agent
	}{
		{"acme", [4]rights{{true, true, true}, {true, true, true}, {false, true, false}, {true, true, false}}},
		{"globex", [4]rights{{true, true, true}, {true, true, true}, {false, false, false}, {false, false, false}}},
	} {
		for i, p := range roles {
			t.Run(tc.company+"/"+string(p.Role), func(t *testing.T) {
				t.Parallel()
				w := authWorld(t)
				req := lease.AcquireRequest{EnvironmentID: "unbound", Company: tc.company, Run: "r", Metadata: map[string]string{"ticket": "T-1"},
					Runner: drivers.RunnerSetOf(runnerSpec(runtime.GOARCH, "ab"))}
				h, err := w.m.Acquire(bg, op, req)
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want[i]

				got, err := w.m.Get(bg, p, h.ID())
				switch {
				case want.read && err != nil:
					t.Fatalf("Get: %v, want allowed", err)
				case !want.read:
					wantReadsAsMissing(t, "Get", w, p, err, h.ID())
				case want.full && (got.Redacted || got.Config == nil || got.Metadata["ticket"] != "T-1"):
					t.Errorf("Get: %+v, want the full record", got)
				case !want.full && (!got.Redacted || got.Config != nil || got.Metadata != nil || got.Labels != nil || got.ProviderLeaseID != ""):
					t.Errorf("Get: config %v metadata %v labels %v provider lease %q redacted %v; want none of them (CFG-2)",
						got.Config, got.Metadata, got.Labels, got.ProviderLeaseID, got.Redacted)
				case got.Runner == nil || got.Runner.SHA256 != strings.Repeat("ab", 32) || (got.Runner.Binary != "") != want.full:
					t.Errorf("Get: runner %+v; want its sum, and its path on the berth host only in the full record", got.Runner)
				}
				ls, err := w.m.List(bg, p, lease.Filter{})
				if err != nil || len(ls) != map[bool]int{true: 1, false: 0}[want.read] {
					t.Errorf("List: %d leases, %v; want %v", len(ls), err, want.read)
				}
				for _, l := range ls {
					if l.Redacted == want.full || !want.full && (l.Config != nil || l.Metadata != nil) {
						t.Errorf("List shows %+v, want full=%v", l, want.full)
					}
				}

				l, err := w.m.Release(bg, p, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
				if want.release {
					if err != nil || l.Status != lease.StatusReleased {
						t.Fatalf("Release: %+v, %v; want released", l, err)
					}
					if !want.full && (l.Config != nil || !l.Redacted) {
						t.Errorf("Release returned the config to a principal who may not read it")
					}
					return
				}
				if l != nil {
					t.Fatalf("Release: %+v, %v; want no record", l, err)
				}
				if want.read {
					// A lease it can see: denied, naming only the id.
					if !errors.Is(err, errcode.ErrDenied) || errors.Is(err, errcode.ErrNotFound) {
						t.Fatalf("Release: %v; want ErrDenied", err)
					}
					wantNoTenantLeak(t, err, "", "")
				} else {
					wantReadsAsMissing(t, "Release", w, p, err, h.ID())
				}
				if st := w.get(h.ID()).Status; st != lease.StatusActive {
					t.Errorf("after a refused release the lease is %s, want active", st)
				}
			})
		}
	}
	for i, p := range roles {
		w := authWorld(t)
		_, err := w.m.Sweep(bg, p)
		if allowed := i < 2; allowed != (err == nil) || !allowed && !errors.Is(err, errcode.ErrDenied) {
			t.Errorf("Sweep as %s: %v, want allowed=%v", p, err, allowed)
		}
	}
	w := authWorld(t)
	for _, p := range roles {
		if _, err := w.m.Release(bg, p, "lse-missing", lease.ReleaseOptions{}); !errors.Is(err, errcode.ErrNotFound) || errors.Is(err, errcode.ErrDenied) {
			t.Errorf("%s releasing a missing lease: %v, want errcode.ErrNotFound", p.Role, err)
		}
	}
}

// wantReadsAsMissing fails unless err, the refusal of op by p of lease id
// (which exists and p may not read), is what op of a missing lease gives
// p: errcode.ErrNotFound (never ErrDenied), the same text but for the id, naming
// no tenant (issue 22 item 7).
func wantReadsAsMissing(t *testing.T, op string, w *world, p authz.Principal, err error, id string) {
	t.Helper()
	const missing = "lse-missing"
	var errMissing error
	switch op {
	case "Get":
		_, errMissing = w.m.Get(bg, p, missing)
	case "Release":
		_, errMissing = w.m.Release(bg, p, missing, lease.ReleaseOptions{Disposition: lease.Destroy})
	default:
		t.Fatalf("no missing-lease case for %s", op)
	}
	if !errors.Is(err, errcode.ErrNotFound) || errors.Is(err, errcode.ErrDenied) {
		t.Fatalf("%s of another company's lease: %v; want errcode.ErrNotFound, as a missing one", op, err)
	}
	if errMissing == nil {
		t.Fatalf("%s of a missing lease succeeded", op)
	}
	if a, b := strings.ReplaceAll(err.Error(), id, "ID"), strings.ReplaceAll(errMissing.Error(), missing, "ID"); a != b {
		t.Errorf("%s: another company's lease reads %q, a missing one %q; want one text", op, a, b)
	}
	wantNoTenantLeak(t, err, "", "")
}
