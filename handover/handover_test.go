package handover_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/handoverhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/lease"
)

var (
	operator = authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	agent    = authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
	outsider = authz.Principal{ID: "agent-2", Role: authz.RoleAgent, Companies: []string{"globex"}}
)

const (
	tokenValue   = "canary-token-7f3a"
	accountValue = "canary-account-91be"
)

// world is a daytona environment with a secret env map and a lease of it,
// over memory stores (nothing is allocated: the service reads records).
type world struct {
	svc     *handover.Service
	res     controller.SecretResolver // the hook handoverhook.New returned
	envs    environment.Store
	leases  lease.Store
	checks  handover.Store
	env     *environment.Environment
	lease   *lease.Lease
	account string // the managed account's reference
	apiKey  config.SecretRef
	logs    *syncbuf.Buffer
	asked   []handover.AuthCheck
}

func newWorld(t *testing.T, checker bool) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{envs: envhook.NewMemoryStore().(environment.Store), leases: lease.NewMemoryStore(), checks: handover.NewMemoryStore(), logs: &syncbuf.Buffer{}}
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	var err error
	if w.apiKey, err = secrets.Put(ctx, "env_1", "api_key", "canary-api-key"); err != nil {
		t.Fatal(err)
	}
	token, _ := secrets.Put(ctx, "env_1", "env.TOKEN", tokenValue)
	acct, _ := secrets.Put(ctx, "host", "account", accountValue)
	w.account = acct.String()
	cfg := config.Config{"api_url": "https://daytona.example/api", "api_key": w.apiKey,
		"snapshot_id": "snap-1", "env": map[string]any{"TOKEN": token}}
	w.env = &environment.Environment{ID: "env_1", Name: "sbx", Driver: "daytona", Status: environment.StatusActive, Config: cfg, Revision: 1}
	if err := w.envs.CreateEnvironment(ctx, w.env, false); err != nil {
		t.Fatal(err)
	}
	reg := drivers.NewRegistry(daytona.New(nil))
	drv, _ := reg.Lookup("daytona")
	fp, err := leasehook.Fingerprint(drv, w.env)
	if err != nil {
		t.Fatal(err)
	}
	w.lease = &lease.Lease{ID: "lease_1", Company: "acme", Environment: "env_1", Run: "run-1", Status: lease.StatusActive,
		Policy: lease.Ephemeral, Provider: "daytona", Fingerprint: fp, Config: cfg.Clone(), AcquiredAt: time.Now()}
	if _, err := w.leases.InsertLease(ctx, w.lease, lease.Quotas{}); err != nil {
		t.Fatal(err)
	}
	var chk handover.Checker
	if checker {
		chk = checkerFunc(func(_ context.Context, _ authz.Principal, req handover.AuthCheck) (handover.Status, string, error) {
			w.asked = append(w.asked, req)
			for _, p := range req.Projects {
				switch p {
				case "denied":
					return handover.StatusFailed, "project denied has no access", nil
				case "broken":
					return "", "", errors.New("harness unreachable")
				case "later":
					return handover.StatusPending, "", nil
				}
			}
			return handover.StatusSucceeded, "", nil
		})
	}
	svc, res, err := handoverhook.New(handoverhook.Sources{Checks: w.checks, Environments: w.envs, Drivers: reg, Leases: w.leases, Secrets: secrets,
		Checker: chk, Logger: slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	w.svc, w.res = svc.(*handover.Service), res
	t.Cleanup(func() {
		if strings.Contains(w.logs.String(), "canary") {
			t.Errorf("the service's log holds a secret value:\n%s", w.logs.String())
		}
	})
	return w
}

var target = controller.SecretTarget{Session: "s_1", Lease: "lease_1", Run: "run-1", Company: "acme"}

func (w *world) uses(projects ...string) []lease.SecretUse {
	return []lease.SecretUse{
		{Source: lease.SecretFromEnvironment, Ref: "TOKEN", Env: "TOKEN"},
		{Source: lease.SecretFromManagedAccount, Ref: w.account, File: "account.json", Projects: projects},
	}
}

// AUTH-2: a preparation replaces the record with a pending one and stores
// the host check's answer; the record names the environment's fingerprint,
// the provider (daytona and its API key's reference) and the sorted
// projects.
func TestPrepareManagedAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, true)
	rec, err := w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"p2", "p1", "p2"})
	if err != nil {
		t.Fatal(err)
	}
	want := handover.AuthCheck{Company: "acme", AccountRef: w.account, Version: 1, Status: handover.StatusSucceeded,
		Fingerprint: w.lease.Fingerprint, Provider: handover.Provider{Driver: "daytona", Account: w.apiKey.String()},
		Projects: []string{"p1", "p2"}, Environment: "env_1", PreparedBy: "ops", CheckedBy: "ops"}
	ignore := func(c handover.AuthCheck) handover.AuthCheck {
		c.Preparation, c.PreparedAt, c.CheckedAt = "", time.Time{}, time.Time{}
		return c
	}
	if d := cmp.Diff(want, ignore(rec)); d != "" {
		t.Errorf("record (-want +got):\n%s", d)
	}
	if len(w.asked) != 1 || w.asked[0].Fingerprint != rec.Fingerprint || w.asked[0].Version != 1 || w.asked[0].AccountRef != w.account {
		t.Errorf("the host's check was asked %+v", w.asked)
	}
	// A failed check replaces the succeeded record: the old validation is gone.
	rec, err = w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"p1", "denied"})
	if err != nil || rec.Status != handover.StatusFailed || rec.Message != "project denied has no access" {
		t.Errorf("prepare with a failing check = %+v, %v; want failed with the host's message", rec, err)
	}
	// A check that cannot run leaves a failed record and says why.
	rec, err = w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"broken"})
	if err == nil || !strings.Contains(err.Error(), "harness unreachable") || rec.Status != handover.StatusFailed {
		t.Errorf("prepare with a broken check = %+v, %v; want failed and the error", rec, err)
	}
	// Operators only; a malformed reference names the field.
	if _, err := w.svc.PrepareManagedAccount(ctx, agent, "acme", w.account, "env_1", nil); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("an agent prepared: %v", err)
	}
	if _, err := w.svc.PrepareManagedAccount(ctx, operator, "acme", "acct-1", "env_1", nil); !errors.Is(err, errcode.ErrInvalid) || !strings.Contains(err.Error(), "account_ref") {
		t.Errorf("a malformed reference = %v, want errcode.ErrInvalid naming account_ref", err)
	}
	if err := w.svc.Clear(ctx, operator, "acme", w.account); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Get(ctx, operator, "acme", w.account); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Get after Clear = %v, want errcode.ErrNotFound", err)
	}
}

// AUTH-2: without a Checker, or with one that answers later, a
// preparation stays pending (refused) until the host records the answer;
// an answer to a replaced preparation is stale and stores nothing.
func TestRecordResultLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, false)
	first, err := w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"p1"})
	if err != nil || first.Status != handover.StatusPending {
		t.Fatalf("prepare = %+v, %v; want pending", first, err)
	}
	if err := w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses("p1")); code(err) != "auth_check_status" {
		t.Errorf("dispatch on a pending check = %v, want %s", err, "auth_check_status")
	}
	second, _ := w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"p1"})
	if _, err := w.svc.RecordResult(ctx, operator, "acme", w.account, first.Preparation, handover.StatusSucceeded, ""); !errors.Is(err, handover.ErrStale) {
		t.Errorf("answer to a replaced preparation = %v, want ErrStale", err)
	}
	if _, err := w.svc.RecordResult(ctx, operator, "acme", w.account, second.Preparation, handover.StatusPending, ""); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("a pending answer = %v, want errcode.ErrInvalid", err)
	}
	if _, err := w.svc.RecordResult(ctx, operator, "acme", w.account, second.Preparation, handover.StatusSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses("p1")); err != nil {
		t.Errorf("dispatch after the answer = %v", err)
	}

	// A Checker that answers later leaves the preparation pending too.
	w = newWorld(t, true)
	rec, err := w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"later"})
	if err != nil || rec.Status != handover.StatusPending || len(w.asked) != 1 {
		t.Fatalf("prepare with a check that answers later = %+v, %v; want pending", rec, err)
	}
	if rec, err = w.svc.RecordResult(ctx, operator, "acme", w.account, rec.Preparation, handover.StatusFailed, "no access"); err != nil || rec.Status != handover.StatusFailed || rec.Message != "no access" {
		t.Errorf("the later answer = %+v, %v", rec, err)
	}
}

func code(err error) string {
	if err == nil {
		return ""
	}
	c := controller.CodeOfSecrets(err)
	// The hand-over's code is the error's reason too (issue 50), and a
	// mismatch speaks to a person without Go identifiers.
	if r := errcode.ReasonOf(err); r != string(c) {
		panic(fmt.Sprintf("errcode.ReasonOf = %q, the hand-over's code %q: %v", r, c, err))
	}
	return c
}

// AUTH-2: dispatch lets a managed account through only when the record
// matches exactly, and refuses with a code naming the part that did not:
// version, status, fingerprint (a config edit), provider, projects (one
// added, one removed); nothing recorded is auth_check_missing. A secret
// env key must be one of the lease environment's.
func TestDispatchMatchesExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, true)
	if err := w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses("p1", "p2")); code(err) != "auth_check_missing" || !errors.Is(err, handover.ErrMismatch) {
		t.Errorf("no record: %v, want %s", err, "auth_check_missing")
	}
	good, err := w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"p1", "p2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses("p2", "p1")); err != nil {
		t.Fatalf("exact match refused: %v", err)
	}
	vals, err := w.res.Resolve(ctx, target, controller.SecretUses(w.uses("p1", "p2")))
	if err != nil || len(vals) != 2 || vals[0] != tokenValue || vals[1] != accountValue {
		t.Fatalf("Resolve = %d values, %v; want the token and the account", len(vals), err)
	}
	for _, tc := range []struct {
		name     string
		mutate   func(*handover.AuthCheck)
		projects []string
		want     string
	}{
		{"project added", nil, []string{"p1", "p2", "p3"}, "auth_check_projects"},
		{"project removed", nil, []string{"p1"}, "auth_check_projects"},
		{"version 2", func(c *handover.AuthCheck) { c.Version = 2 }, []string{"p1", "p2"}, "auth_check_version"},
		{"failed", func(c *handover.AuthCheck) { c.Status = handover.StatusFailed }, []string{"p1", "p2"}, "auth_check_status"},
		{"other provider", func(c *handover.AuthCheck) { c.Provider.Account = "secret:sec_other@v1" }, []string{"p1", "p2"}, "auth_check_provider"},
		{"other fingerprint", func(c *handover.AuthCheck) { c.Fingerprint = "sha256:00" }, []string{"p1", "p2"}, "auth_check_fingerprint"},
	} {
		rec := good
		if tc.mutate != nil {
			tc.mutate(&rec)
		}
		if err := w.checks.PutAuthCheck(ctx, rec); err != nil {
			t.Fatal(err)
		}
		err := w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses(tc.projects...))
		if code(err) != tc.want {
			t.Errorf("%s: Check = %v, want %s", tc.name, err, tc.want)
		}
		if _, err := w.res.Resolve(ctx, target, controller.SecretUses(w.uses(tc.projects...))); code(err) != tc.want {
			t.Errorf("%s: Resolve = %v, want %s", tc.name, err, tc.want)
		}
	}
	// A config edit: the new preparation is for the new fingerprint, the
	// lease still runs the old config.
	w.env.Config["snapshot_id"] = "snap-2"
	w.env.Revision = 2
	if err := w.envs.UpdateEnvironment(ctx, w.env, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"p1", "p2"}); err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses("p1", "p2")); code(err) != "auth_check_fingerprint" {
		t.Errorf("after a config edit: %v, want %s", err, "auth_check_fingerprint")
	}
	// Secret env keys come from the lease's environment only.
	unknown := []lease.SecretUse{{Source: lease.SecretFromEnvironment, Ref: "OTHER", Env: "OTHER"}}
	if err := w.svc.Check(ctx, agent, target.Company, target.Lease, unknown); code(err) != "secret_unknown" || errcode.Code(err) != errcode.Invalid {
		t.Errorf("unknown secret env key: %v, want %s", err, "secret_unknown")
	}
	// Another company's session, or an agent of another company.
	other := target
	other.Company = "globex"
	if err := w.svc.Check(ctx, operator, other.Company, other.Lease, unknown); code(err) != "lease_mismatch" {
		t.Errorf("lease of another company: %v, want %s", err, "lease_mismatch")
	}
	if err := w.svc.Check(ctx, outsider, target.Company, target.Lease, w.uses("p1", "p2")); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("an agent of another company handed over the account: %v", err)
	}
	for _, e := range []error{w.svc.Check(ctx, agent, target.Company, target.Lease, w.uses("p1"))} {
		if e != nil && (strings.Contains(e.Error(), accountValue) || strings.Contains(e.Error(), tokenValue)) {
			t.Errorf("an error holds a secret value: %v", e)
		}
	}
}

// Issue 22 item 7: a project auth check the principal may not read
// (another company's) reads as a missing one: errcode.ErrNotFound with the same
// text but for what the caller named; a principal who may read it but not
// act on it (an agent of the company) is denied.
func TestAnotherCompanysAuthCheckReadsAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, false)
	rec, err := w.svc.PrepareManagedAccount(ctx, operator, "acme", w.account, "env_1", []string{"p1"})
	if err != nil {
		t.Fatal(err)
	}
	missing := "secret:missing@v1"
	for name, op := range map[string]func(p authz.Principal, ref string) error{
		"Get": func(p authz.Principal, ref string) error { _, err := w.svc.Get(ctx, p, "acme", ref); return err },
		"RecordResult": func(p authz.Principal, ref string) error {
			_, err := w.svc.RecordResult(ctx, p, "acme", ref, rec.Preparation, handover.StatusSucceeded, "")
			return err
		},
		"Clear": func(p authz.Principal, ref string) error { return w.svc.Clear(ctx, p, "acme", ref) },
	} {
		t.Run(name, func(t *testing.T) {
			errMissing, errForeign := op(operator, missing), op(outsider, w.account)
			for _, err := range []error{errMissing, errForeign} {
				if !errors.Is(err, errcode.ErrNotFound) || errors.Is(err, errcode.ErrDenied) {
					t.Fatalf("%s = %v, want errcode.ErrNotFound (not ErrDenied)", name, err)
				}
			}
			if a, b := strings.ReplaceAll(errForeign.Error(), w.account, "REF"), strings.ReplaceAll(errMissing.Error(), missing, "REF"); a != b {
				t.Errorf("another company's record reads %q, a missing one %q; want one text", a, b)
			}
			if err := op(agent, w.account); !errors.Is(err, errcode.ErrDenied) || errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("an agent of the company = %v, want ErrDenied (it may see the record)", err)
			}
		})
	}
	if got, err := w.svc.Get(ctx, operator, "acme", w.account); err != nil || got.Preparation != rec.Preparation {
		t.Errorf("after the refusals the record is %+v, %v; want it unchanged", got, err)
	}
}

// checkerFunc adapts a function to handover.Checker.
type checkerFunc func(ctx context.Context, p authz.Principal, check handover.AuthCheck) (handover.Status, string, error)

func (f checkerFunc) CheckProjectAuth(ctx context.Context, p authz.Principal, check handover.AuthCheck) (handover.Status, string, error) {
	return f(ctx, p, check)
}
