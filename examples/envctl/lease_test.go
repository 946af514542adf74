package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// TestLeaseCommands drives lease acquire/list/release/sweep on a fake
// environment through separate commands on one SQLite file, as an operator
// would: every command is a fresh process, so releases and sweeps work by
// provider lease id (LEASE-6, 7, 8, 9).
func TestLeaseCommands(t *testing.T) {
	c := newCLI(t)
	const canary = "CANARY-lease-5e1f"
	envID := c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`","api_key":"`+canary+`"}`)

	// Acquire: an active lease recorded with the provider's sandbox id.
	var l lease.Lease
	c.okJSON(&l, "lease", "acquire", "sbx", "--company", "acme", "--run", "r1")
	if l.Status != lease.StatusActive || l.Company != "acme" || l.Environment != envID || l.ProviderLeaseID == "" {
		t.Fatalf("acquired lease: %+v", l)
	}
	if st, ok := fakectl.Of(c.fake).State(l.ProviderLeaseID); !ok || st != drivers.StateRunning {
		t.Fatalf("sandbox %s at the provider: %v %v", l.ProviderLeaseID, st, ok)
	}
	// LEASE-8: the same run acquiring again from another process (a new
	// envctl) cannot take over the live lease: it is refused naming the
	// lease, and no second sandbox is made.
	_, msg := c.fail("lease", "acquire", envID, "--company", "acme", "--run", "r1")
	wantContains(t, "second acquire of run r1", msg, l.ID, "release it first")
	if n := len(fakectl.Of(c.fake).Sandboxes()); n != 1 {
		t.Errorf("second acquire of run r1: %d sandboxes, want 1", n)
	}
	wantContains(t, "lease list", c.ok("lease", "list", "--status", "active"), l.ID, "active", "acme", l.ProviderLeaseID)
	var listed []*lease.Lease
	c.okJSON(&listed, "lease", "list", "--env", "sbx")
	if len(listed) != 1 || listed[0].ID != l.ID {
		t.Errorf("lease list --env sbx: %+v", listed)
	}

	// Release: destroyed at the provider, proven by its receipt (LEASE-7).
	out := c.ok("lease", "release", l.ID, "--disposition", "destroy")
	wantContains(t, "release", out, "released", "cleanup: confirmed")
	if st, _ := fakectl.Of(c.fake).State(l.ProviderLeaseID); st != drivers.StateDestroyed {
		t.Errorf("after release the sandbox is %s, want destroyed", st)
	}
	// Releasing an ended lease returns it unchanged.
	wantContains(t, "second release", c.ok("lease", "release", l.ID), "released")

	// retain_on_failure keeps a failed run's sandbox (retained).
	var kept lease.Lease
	c.okJSON(&kept, "lease", "acquire", "sbx", "--company", "acme", "--run", "r2", "--policy", "retain_on_failure")
	var retained lease.Lease
	c.okJSON(&retained, "lease", "release", kept.ID, "--failed", "--reason", "tests failed")
	if retained.Status != lease.StatusRetained || retained.FailureReason != "tests failed" {
		t.Errorf("release --failed of a retain_on_failure lease: %s %q", retained.Status, retained.FailureReason)
	}

	// An unconfirmed destroy leaves the lease pending cleanup; a sweep
	// retries it once the provider cooperates (LEASE-7, LEASE-9).
	var stuck lease.Lease
	c.okJSON(&stuck, "lease", "acquire", "sbx", "--company", "acme", "--run", "r3")
	fakectl.Of(c.fake).RefuseStop(stuck.ProviderLeaseID, errors.New("provider busy"))
	_, msg = c.fail("lease", "release", stuck.ID)
	wantContains(t, "refused release", msg, stuck.ID, "cleanup pending")
	wantContains(t, "pending list", c.ok("lease", "list", "--status", "pending_cleanup"), stuck.ID)
	fakectl.Of(c.fake).ClearFaults()

	// An orphan: a sandbox labelled by this instance that no lease owns.
	orphan, err := c.fake.Acquire(context.Background(), config.Config{}, drivers.AcquireRequest{
		LeaseID: "lse_gone", Labels: map[string]string{"berth.instance": "berth", "berth.environment": envID, "berth.lease": "lse_gone"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var rep lease.SweepReport
	c.okJSON(&rep, "lease", "sweep")
	if rep.CleanedUp != 1 || rep.OrphansDestroyed != 1 || rep.StillPending != 0 {
		t.Errorf("sweep report: %+v; want 1 cleaned up, 1 orphan destroyed", rep)
	}
	for id, want := range map[string]drivers.State{
		stuck.ProviderLeaseID: drivers.StateDestroyed,
		orphan.ID():           drivers.StateDestroyed,
		kept.ProviderLeaseID:  drivers.StateRunning, // owned by the retained lease
	} {
		if st, _ := fakectl.Of(c.fake).State(id); st != want {
			t.Errorf("after sweep sandbox %s is %s, want %s", id, st, want)
		}
	}
	wantContains(t, "readable sweep", c.ok("lease", "sweep"), "sweep: 0 leases claimed", "orphan sandboxes of this instance destroyed")

	if strings.Contains(c.all.String(), canary) {
		t.Errorf("the api key was printed")
	}
}

// TestLeaseErrors: malformed or refused lease commands fail with a message
// that names the environment, lease or flag.
func TestLeaseErrors(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.createFake("sbx", `{}`)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"company required", []string{"lease", "acquire", "sbx"}, []string{"sbx", "--company"}},
		{"bad policy", []string{"lease", "acquire", "sbx", "--company", "acme", "--policy", "forever"}, []string{"sbx", "--policy", `"forever"`}},
		{"bad capability", []string{"lease", "acquire", "sbx", "--company", "acme", "--require", "teleport"}, []string{"sbx", "--require", `"teleport"`}},
		{"unknown environment", []string{"lease", "acquire", "nope", "--company", "acme"}, []string{`"nope"`, "not found"}},
		{"agent without a grant", []string{"--as", "agent:a1", "lease", "acquire", "sbx", "--company", "acme"}, []string{"agent", "may not lease", "sbx"}},
		{"unknown lease", []string{"lease", "release", "lse_nope"}, []string{"lse_nope", "not found"}},
		{"bad disposition", []string{"lease", "release", "lse_x", "--disposition", "burn"}, []string{"lse_x", `"burn"`}},
		{"bad status", []string{"lease", "list", "--status", "sleeping"}, []string{"--status", `"sleeping"`}},
		{"board member may not sweep", []string{"--as", "board_member:b", "lease", "sweep"}, []string{"board_member", "may not sweep"}},
	} {
		_, msg := c.fail(tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", tc.name, msg, w)
			}
		}
	}
	if n := len(fakectl.Of(c.fake).Sandboxes()); n != 0 {
		t.Errorf("refused commands created %d sandboxes", n)
	}
}

// TestLeaseAuthorizationThroughEnvctl is the AUTH-1 / ASG-3 table through
// the CLI: roles (--as) x (own company, other company, bound, unbound,
// archived). berth decides, not envctl: only admins and operators lease by
// environment id; agents lease through their company's binding (a scope);
// board members never lease; nobody leases an environment bound to another
// company; refusals name no other tenant; releases, reads and sweeps follow
// the same rules, and lease records show no config to board members or
// agents (CFG-2).
func TestLeaseAuthorizationThroughEnvctl(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	// The table leases more than the default quotas allow; it is about
	// who may lease, so it lifts them (issue 51's settings).
	c.ok("settings", "set", "--quota-per-company", "0", "--quota-per-company-env", "0")
	const canary = "cfg-canary-71c"
	own := c.createFake("own-box", `{"region":"`+canary+`"}`)
	other := c.createFake("other-box", `{}`)
	unbound := c.createFake("free-box", `{}`)
	arch := c.createFake("old-box", `{}`)
	c.ok("assign", "set", "workspace", "ws-a", own, "--company", "acme")
	c.ok("assign", "set", "workspace", "ws-g", other, "--company", "globex")
	c.ok("assign", "set", "workspace", "ws-old", arch, "--company", "acme")
	c.ok("env", "archive", arch)

	as := map[string]string{
		"admin": "instance_admin:root", "operator": "local_operator:ops",
		"board": "board_member:bea@acme", "agent": "agent:bot@acme",
	}
	order := []string{"admin", "operator", "board", "agent"}
	type cell struct {
		ok   bool
		want string // in the refusal
	}
	yes, denied := cell{ok: true}, cell{want: "permission denied"}
	tests := []struct {
		name string
		args []string
		want [4]cell // admin, operator, board member, agent
	}{
		{"own company, bound, through its scope", []string{"--company", "acme", "--workspace", "ws-a"}, [4]cell{yes, yes, denied, yes}},
		{"own company, bound, by id", []string{own, "--company", "acme"}, [4]cell{yes, yes, denied, denied}},
		{"own company, unbound, by id", []string{unbound, "--company", "acme"}, [4]cell{yes, yes, denied, denied}},
		{"own company, archived, by id", []string{arch, "--company", "acme"}, [4]cell{{want: "archived"}, {want: "archived"}, denied, denied}},
		{"own company, archived, through its scope", []string{"--company", "acme", "--workspace", "ws-old"}, [4]cell{{want: "archived"}, {want: "archived"}, denied, {want: "archived"}}},
		{"own company, another company's binding key (keys are per company: nothing bound)", []string{"--company", "acme", "--workspace", "ws-g"}, [4]cell{{want: "no environment bound"}, {want: "no environment bound"}, denied, {want: "no environment bound"}}},
		{"own company, another company's environment by id", []string{other, "--company", "acme"}, [4]cell{{want: "another company"}, {want: "another company"}, denied, denied}},
		{"other company, through its scope", []string{"--company", "globex", "--workspace", "ws-g"}, [4]cell{yes, yes, denied, denied}},
	}
	run := 0
	for _, tc := range tests {
		for i, role := range order {
			run++
			args := append([]string{"--as", as[role], "--json", "lease", "acquire", "--run", fmt.Sprint("r", run)}, tc.args...)
			w := tc.want[i]
			if w.ok {
				var l lease.Lease
				if err := json.Unmarshal([]byte(c.ok(args...)), &l); err != nil || l.Status != lease.StatusActive {
					t.Errorf("%s as %s: %+v %v, want an active lease", tc.name, role, l, err)
				}
				if role == "agent" && (l.Config != nil || !l.Redacted) {
					t.Errorf("%s as %s: the lease record shows the config %v (CFG-2)", tc.name, role, l.Config)
				}
				continue
			}
			_, msg := c.fail(args...)
			if !strings.Contains(msg, w.want) {
				t.Errorf("%s as %s: refusal %q lacks %q", tc.name, role, msg, w.want)
			}
			company := "acme"
			if slices.Contains(tc.args, "globex") {
				company = "globex"
			}
			for _, leak := range []string{"acme", "globex", other, own} {
				if leak != company && !slices.Contains(tc.args, leak) && strings.Contains(msg, leak) {
					t.Errorf("%s as %s: refusal %q names another tenant (%s)", tc.name, role, msg, leak)
				}
			}
		}
	}

	// Reads, releases and sweeps of an acme lease and a globex lease.
	var acmeL, globexL lease.Lease
	c.okJSON(&acmeL, "lease", "acquire", own, "--company", "acme", "--run", "read-a")
	c.okJSON(&globexL, "lease", "acquire", unbound, "--company", "globex", "--run", "read-g")
	for _, role := range []string{"board", "agent"} {
		out := c.ok("--as", as[role], "--json", "lease", "list")
		if strings.Contains(out, canary) {
			t.Errorf("lease list as %s shows the environment's config:\n%s", role, out)
		}
		var ls []*lease.Lease
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Company != "acme" || l.Config != nil || !l.Redacted {
				t.Errorf("lease list as %s shows %s of %s with config %v (want acme's only, redacted)", role, l.ID, l.Company, l.Config)
			}
		}
		// Another company's lease reads as a missing one: the same
		// refusal but for the id (issue 22 item 7).
		_, msg := c.fail("--as", as[role], "lease", "release", globexL.ID)
		_, missing := c.fail("--as", as[role], "lease", "release", "lse-missing")
		if strings.ReplaceAll(msg, globexL.ID, "ID") != strings.ReplaceAll(missing, "lse-missing", "ID") || !strings.Contains(msg, "not found") || strings.Contains(msg, "globex") {
			t.Errorf("release of globex's lease as %s: %q, want the refusal of a missing lease (%q), not naming globex", role, msg, missing)
		}
		_, msg = c.fail("--as", as[role], "lease", "sweep")
		wantContains(t, "sweep as "+role, msg, "may not sweep")
	}
	var full []*lease.Lease
	c.okJSON(&full, "--as", as["operator"], "lease", "list")
	if len(full) == 0 || full[0].Config == nil || full[0].Redacted {
		t.Errorf("lease list as operator: %+v, want full records", full)
	}
	_, msg := c.fail("--as", as["board"], "lease", "release", acmeL.ID)
	wantContains(t, "release as board member", msg, "permission denied")
	wantContains(t, "release as agent", c.ok("--as", as["agent"], "lease", "release", acmeL.ID), "released")
	wantContains(t, "release as admin", c.ok("--as", as["admin"], "lease", "release", globexL.ID), "released")
}

func TestParsePrincipal(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]authz.Principal{
		"local_operator:envctl": {ID: "envctl", Role: authz.RoleLocalOperator},
		"agent":                 {Role: authz.RoleAgent},
		"agent:a1@acme, globex": {ID: "a1", Role: authz.RoleAgent, Companies: []string{"acme", "globex"}},
		"board_member:b@":       {ID: "b", Role: authz.RoleBoardMember},
	} {
		if diff := cmp.Diff(want, parsePrincipal(in)); diff != "" {
			t.Errorf("parsePrincipal(%q) (-want +got):\n%s", in, diff)
		}
	}
}

// TestHostLeaseReleasedByALaterCommand (issue 10 item 4, LEASE-7): a local
// lease's session lives in the envctl run that acquired it; the next run's
// 'lease release' holds no session and checks nothing while the acquiring
// run's claim lasts, so it records pending_cleanup naming that holder and
// never claims a confirmed cleanup.
func TestHostLeaseReleasedByALaterCommand(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	c.ok("env", "create", "--name", "here", "--driver", "local", "--config", writeFile(t, `{"workdir":"`+dir+`"}`))
	var l lease.Lease
	c.okJSON(&l, "lease", "acquire", "here", "--company", "acme")
	if l.Status != lease.StatusActive || l.Holder == "" {
		t.Fatalf("acquired: %+v, want an active lease with a holder", l)
	}
	out, msg := c.fail("--json", "lease", "release", l.ID)
	var after lease.Lease
	if err := json.Unmarshal([]byte(out), &after); err != nil {
		t.Fatalf("release output: %v\n%s", err, out)
	}
	if after.Status != lease.StatusPendingCleanup || after.Cleanup == "confirmed" || !strings.Contains(after.FailureReason, l.Holder) {
		t.Errorf("after a release by a later run: %s, cleanup %s, reason %q; want pending_cleanup naming %s", after.Status, after.Cleanup, after.FailureReason, l.Holder)
	}
	wantContains(t, "release error", msg, "cleanup pending", l.Holder)
}

// TestLeaseClaimGraceFlag (LEASE-9): lease acquire and sweep take
// --claim-grace (berth.Options.Leases.ClaimGrace); a malformed value is refused
// naming the flag.
func TestLeaseClaimGraceFlag(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.createFake("sbx", `{}`)
	c.ok("lease", "sweep", "--claim-grace", "30s")
	c.ok("lease", "acquire", "sbx", "--company", "acme", "--claim-grace", "2m")
	out, errOut, err := c.exec("", "lease", "sweep", "--claim-grace", "soon")
	if err == nil || !strings.Contains(errOut+out, "claim-grace") {
		t.Errorf("a malformed --claim-grace: err %v, output %q", err, out+errOut)
	}
}
