package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/lease"
)

// The tokens of two agents "ci", of acme and of globex: a file shaped so
// is refused at start-up now (one identity, one grant), so the set is
// made by hand, as a server of before would have read it.
const (
	tokCIAcme   = "ci-acme-token-0123456789"
	tokCIGlobex = "ci-globex-token-0123456789"
)

func twoGrantsOfCI() tokenSet {
	return tokenSet{
		hashToken(tokAdmin):    adminPrincipal,
		hashToken(tokCIAcme):   {ID: "ci", Role: authz.RoleAgent, Companies: []string{"acme"}},
		hashToken(tokCIGlobex): {ID: "ci", Role: authz.RoleAgent, Companies: []string{"globex"}},
	}
}

// openStream opens the output events of a run and returns its status and
// a closer.
func (e *tenv) openStream(t testing.TB, company, id, tok string) (int, func()) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/v1/companies/"+company+"/runs/"+id+"/output", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, func() { res.Body.Close() }
}

// Idempotency records and event-stream slots are keyed by the
// credential, not by "ROLE ID": agent ci of globex, refused on acme's
// runs, does not get acme's recorded 202 by replaying acme's key (the
// route's authorization runs first), its own key of the same name is its
// own, and acme's open streams do not count against it.
func TestPerCallerRecordsAreKeyedByCredential(t *testing.T) {
	e := newEnv(t, "sqlite", &envOpts{maxStreams: 1})
	r := e.restartWithSet(t, twoGrantsOfCI(), 1)
	v := r.createFake(t, "box")
	for company, ws := range map[string]string{"acme": "wa", "globex": "wg"} {
		r.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/" + company + "/assignments/workspace/" + ws, token: tokAdmin,
			body: map[string]any{"environmentId": v.ID}})
	}
	start := func(company, ws, tok string) call {
		return call{method: "POST", path: "/api/v1/companies/" + company + "/runs", token: tok, header: map[string]string{"Idempotency-Key": "k"},
			body: map[string]any{"workspace": ws, "argv": []string{"sleep", "600"}}}
	}
	var acme runView
	r.must(t, http.StatusAccepted, start("acme", "wa", tokCIAcme)).decode(t, &acme)
	if got := r.do(t, start("acme", "wa", tokCIGlobex)); got.status != http.StatusForbidden || strings.Contains(string(got.body), acme.ID) {
		t.Fatalf("globex's ci replaying acme's key: %d %s, want 403 without acme's run", got.status, got.body)
	}
	var globex runView
	r.must(t, http.StatusAccepted, start("globex", "wg", tokCIGlobex)).decode(t, &globex)
	if globex.ID == acme.ID || globex.Company != "globex" {
		t.Fatalf("globex's run with its own key k: %+v", globex)
	}
	// The same credential's retry still gets its own run back.
	var again runView
	r.must(t, http.StatusAccepted, start("acme", "wa", tokCIAcme)).decode(t, &again)
	if again.ID != acme.ID {
		t.Errorf("acme's retry got run %s, want %s", again.ID, acme.ID)
	}
	r.waitRun(t, "acme", acme.ID, tokCIAcme, func(v runView) bool { return v.Status != runStarting })
	r.waitRun(t, "globex", globex.ID, tokCIGlobex, func(v runView) bool { return v.Status != runStarting })
	st, closeAcme := r.openStream(t, "acme", acme.ID, tokCIAcme)
	defer closeAcme()
	if st != http.StatusOK {
		t.Fatalf("acme's stream = %d", st)
	}
	st, closeGlobex := r.openStream(t, "globex", globex.ID, tokCIGlobex)
	defer closeGlobex()
	if st != http.StatusOK {
		t.Errorf("globex's first stream while acme holds one = %d, want 200 (its own slots)", st)
	}
	for company, id := range map[string]string{"acme": acme.ID, "globex": globex.ID} {
		r.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/" + company + "/runs/" + id + "/stop", token: tokAdmin})
	}
}

// An idempotent replay goes only to the grant the record was made for: a
// token whose companies changed (the file read again) gets a conflict on
// its key, not the recorded answer.
func TestIdempotentReplayNeedsTheSameGrant(t *testing.T) {
	e := newEnv(t, "sqlite", &envOpts{tokensFile: testTokens})
	v := e.createFake(t, "box")
	e.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/acme/assignments/workspace/ws1", token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
	start := call{method: "POST", path: "/api/v1/companies/acme/runs", token: tokAgent, header: map[string]string{"Idempotency-Key": "k"},
		body: map[string]any{"workspace": "ws1", "argv": []string{"echo"}}}
	var first runView
	e.must(t, http.StatusAccepted, start).decode(t, &first)
	e.waitRun(t, "acme", first.ID, tokAgent, ended)
	wider := strings.Replace(testTokens, `"id": "agent-7", "companies": ["acme"]`, `"id": "agent-7", "companies": ["acme", "globex"]`, 1)
	if err := os.WriteFile(filepath.Join(e.dir, "tokens.json"), []byte(wider), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.s.tokens.reload(); err != nil {
		t.Fatal(err)
	}
	r := e.must(t, http.StatusConflict, start)
	if er := r.err(t); er.Field != "Idempotency-Key" || strings.Contains(string(r.body), first.ID) {
		t.Errorf("a replay to another grant: %s", r.body)
	}
}

// restartWithSet starts a server on e's database with the token set set
// (made by hand) and maxStreams stream slots.
func (e *tenv) restartWithSet(t testing.TB, set tokenSet, maxStreams int) *tenv {
	t.Helper()
	return e.restartOpts(t, set, maxStreams, limits{})
}

// A cookie session's state-changing requests and POST /login come from
// the server's own origin: another Origin or a Sec-Fetch-Site other than
// same-origin is refused (403) before anything happens, and /login sets
// no cookie; a bearer token's requests (no browser) pass.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	form := func(h map[string]string) *resp {
		hd := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
		for k, v := range h {
			hd[k] = v
		}
		return e.do(t, call{method: "POST", path: "/login", body: "token=" + url.QueryEscape(tokBoard), header: hd})
	}
	for _, h := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "null"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site", "Origin": e.ts.URL},
	} {
		r := form(h)
		if r.status != http.StatusForbidden || r.header.Get("Set-Cookie") != "" {
			t.Errorf("POST /login with %v = %d (cookie %q), want 403 and no cookie", h, r.status, r.header.Get("Set-Cookie"))
		}
	}
	// A browser posts the login form under Referrer-Policy: no-referrer
	// with Origin: null and Sec-Fetch-Site: same-origin.
	if r := form(map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}); r.status != http.StatusSeeOther {
		t.Errorf("POST /login as a browser posts the form = %d", r.status)
	}
	r := form(map[string]string{"Origin": e.ts.URL, "Sec-Fetch-Site": "same-origin"})
	if r.status != http.StatusSeeOther {
		t.Fatalf("POST /login from the server's own page = %d", r.status)
	}
	ck := sessionCookieOf(t, r)
	var sv sessionView
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: ck, header: map[string]string{"Origin": "https://evil.example"}}).decode(t, &sv)
	ops, opsCSRF := e.loginWithToken(t, tokOperator)
	create := func(name string, h map[string]string) *resp {
		hd := map[string]string{csrfHeader: opsCSRF}
		for k, v := range h {
			hd[k] = v
		}
		return e.do(t, call{method: "POST", path: "/api/v1/environments", cookie: ops, header: hd, body: map[string]any{"name": name, "driver": "fake"}})
	}
	for i, h := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}} {
		if r := create(fmt.Sprint("evil", i), h); r.status != http.StatusForbidden {
			t.Errorf("a cookie create with %v = %d, want 403", h, r.status)
		}
	}
	if r := create("mine", map[string]string{"Origin": e.ts.URL, "Sec-Fetch-Site": "same-origin"}); r.status != http.StatusCreated {
		t.Errorf("a cookie create from the server's own page = %d %s", r.status, r.body)
	}
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokOperator,
		header: map[string]string{"Origin": "https://elsewhere.example"}, body: map[string]any{"name": "scripted", "driver": "fake"}})
	var envs page[map[string]any]
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments", token: tokAdmin}).decode(t, &envs)
	for _, it := range envs.Items {
		if strings.HasPrefix(fmt.Sprint(it["name"]), "evil") {
			t.Errorf("a refused cross-site create made %v", it["name"])
		}
	}
}

// Every HTML response, the login form among them, carries the framing
// and content headers: a CSP with frame-ancestors 'none' and no
// unsafe-inline, X-Frame-Options: DENY, nosniff, Referrer-Policy:
// no-referrer.
func TestEveryPageCarriesTheFramingHeaders(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	link, err := e.s.host.ensureAdmin(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin := sessionCookieOf(t, e.do(t, call{method: "GET", path: "/login?link=" + url.QueryEscape(link)}))
	for _, c := range []call{
		{method: "GET", path: "/login"},
		{method: "GET", path: "/"},
		{method: "GET", path: "/", cookie: admin},
		{method: "GET", path: envPagePath, cookie: admin},
		{method: "GET", path: sessionsPagePath, cookie: admin},
		{method: "GET", path: "/login?link=used-or-unknown"},
		{method: "GET", path: "/api/v1/session", token: tokAdmin},
	} {
		r := e.do(t, c)
		h := r.header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "default-src 'self'") ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s (%d): CSP %q, X-Frame-Options %q, X-Content-Type-Options %q, Referrer-Policy %q", c.method, c.path, r.status,
				csp, h.Get("X-Frame-Options"), h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
		}
	}
}

// A principal has at most 4 runs in flight and a company 8 (the
// defaults); one more is refused with 429, the error shape and
// Retry-After: 5, and nothing is leased for it. A run that ended frees
// its place.
func TestRunsAreCappedPerPrincipalAndCompany(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	// Each principal on its own environment: the library's default lease
	// quota allows 4 live leases of a company on one environment.
	w := e.createFake(t, "box2")
	long := map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}}
	var runs []runView
	for i, tok := range []string{tokAdmin, tokOperator} {
		body := map[string]any{"environmentId": []string{v.ID, w.ID}[i], "argv": []string{"sleep", "600"}}
		for range 4 {
			runs = append(runs, e.startRun(t, "acme", tok, body))
		}
	}
	// over returns the refusal's error shape as JSON text (the cap it
	// names may be in the message or, for a person's message, the detail).
	over := func(tok, company string, body map[string]any) string {
		t.Helper()
		r := e.must(t, http.StatusTooManyRequests, call{method: "POST", path: "/api/v1/companies/" + company + "/runs", token: tok, body: body})
		if r.header.Get("Retry-After") != "5" {
			t.Errorf("Retry-After %q, want 5", r.header.Get("Retry-After"))
		}
		if er := r.err(t); er.Code != "unavailable" {
			t.Errorf("a run over a cap: code %q, want unavailable", er.Code)
		}
		return string(r.body)
	}
	if er := over(tokAdmin, "globex", long); !strings.Contains(er, "-max-runs-per-principal") {
		t.Errorf("the admin's fifth run: %s", er)
	}
	e.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/acme/assignments/workspace/ws1", token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
	if er := over(tokAgent, "acme", map[string]any{"workspace": "ws1", "argv": []string{"echo"}}); !strings.Contains(er, "-max-runs-per-company") || !strings.Contains(er, `\"acme\"`) {
		t.Errorf("acme's ninth run: %s", er)
	}
	ls, err := e.s.stores.Leases.ListLeases(t.Context(), lease.Filter{Live: true})
	if err != nil || len(ls) != 8 {
		t.Errorf("live leases: %d, %v; want the 8 runs' only", len(ls), err)
	}
	// Another company is not held back by acme's runs but by the
	// principal's own.
	e.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/globex/assignments/workspace/wg", token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + runs[0].ID + "/stop", token: tokAdmin})
	e.waitRun(t, "acme", e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"echo", "freed"}}).ID, tokAdmin, ended)
	// The library's quota error is a 429 too.
	if st := statusOf(fmt.Errorf("acquire: %w", lease.ErrQuota)); st != http.StatusTooManyRequests {
		t.Errorf("lease.ErrQuota = %d, want 429", st)
	}
}

// Every run has a deadline: without timeoutSeconds the server's
// -run-timeout (15 min by default), with it that; more than an hour is
// refused. A run past its deadline is stopped.
func TestEveryRunHasADeadline(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	def := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"echo"}})
	if got := def.Deadline.Sub(def.CreatedAt); got != 15*time.Minute {
		t.Errorf("a run without timeoutSeconds: deadline %s after its start, want 15m", got)
	}
	one := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"echo"}, "timeoutSeconds": 60})
	if got := one.Deadline.Sub(one.CreatedAt); got != time.Minute {
		t.Errorf("timeoutSeconds 60: deadline %s after its start", got)
	}
	e.must(t, http.StatusBadRequest, call{method: "POST", path: "/api/v1/companies/acme/runs", token: tokAdmin, raw: true,
		body: map[string]any{"environmentId": v.ID, "argv": []string{"echo"}, "timeoutSeconds": 3601}})
	e.waitRun(t, "acme", def.ID, tokAdmin, ended)
	e.waitRun(t, "acme", one.ID, tokAdmin, ended)

	// A server whose -run-timeout is a second ends a long task by itself.
	short := e.restartOpts(t, twoGrantsOfCI(), 4, limits{runTimeout: time.Second})
	sv := short.createFake(t, "short")
	r := short.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": sv.ID, "argv": []string{"sleep", "600"}})
	done := short.waitRun(t, "acme", r.ID, tokAdmin, ended)
	if done.Status == runExited && done.Exit != nil && done.Exit.Code == 0 {
		t.Errorf("a 600 s task under a 1 s deadline exited 0: %+v", done)
	}
	if done.Receipt == nil || done.Receipt.Cleanup != "confirmed" {
		t.Errorf("the run past its deadline left its lease: %+v", done)
	}
}

// Ended runs are forgotten after -run-retention (24 h): their reads are
// 404; runs in flight are kept.
func TestEndedRunsArePrunedAfterRetention(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	r := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"echo"}})
	e.waitRun(t, "acme", r.ID, tokAdmin, ended)
	long := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}})
	if n := e.s.runs.prune(time.Now().Add(23 * time.Hour)); n != 0 {
		t.Errorf("pruned %d runs before their retention", n)
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/runs/" + r.ID, token: tokAdmin})
	if n := e.s.runs.prune(time.Now().Add(25 * time.Hour)); n != 1 {
		t.Errorf("pruned %d runs after their retention, want 1", n)
	}
	e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/companies/acme/runs/" + r.ID, token: tokAdmin})
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/runs/" + long.ID, token: tokAdmin})
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + long.ID + "/stop", token: tokAdmin})
}

// The maintenance timers run on one replica at a time: the claim in
// server_timers goes to one of two servers on one PostgreSQL, its holder
// renews it, and the other takes it over only once it expired.
func TestMaintenanceRunsOnOneReplicaAtATime(t *testing.T) {
	e := newEnv(t, "postgres", nil)
	other := e.restartWithSet(t, twoGrantsOfCI(), 4)
	ctx := context.Background()
	a, err := e.s.maintain(ctx, "replica-a")
	if err != nil || !a.Claimed || a.SweepErr != nil || a.PoolsErr != nil || a.HealthErr != nil {
		t.Fatalf("the first replica's round: %+v, %v", a, err)
	}
	if b, err := other.s.maintain(ctx, "replica-b"); err != nil || b.Claimed {
		t.Fatalf("the second replica's round while the first holds the claim: %+v, %v", b, err)
	}
	if a, err := e.s.maintain(ctx, "replica-a"); err != nil || !a.Claimed {
		t.Fatalf("the holder's next round: %+v, %v", a, err)
	}
	if _, err := e.s.host.db.Exec(`UPDATE server_timers SET expires_at = expires_at - 3600`); err != nil {
		t.Fatal(err)
	}
	if b, err := other.s.maintain(ctx, "replica-b"); err != nil || !b.Claimed {
		t.Fatalf("the second replica once the claim expired: %+v, %v", b, err)
	}
	if a, err := e.s.maintain(ctx, "replica-a"); err != nil || a.Claimed {
		t.Fatalf("the first replica after the takeover: %+v, %v", a, err)
	}
}

// The server sweeps by itself on -sweep-interval: a lease past its expiry
// is expired and its sandbox destroyed without anyone posting to
// /api/v1/sweep.
func TestServerSweepsByItself(t *testing.T) {
	e := newEnv(t, "sqlite", &envOpts{limits: limits{sweepInterval: 50 * time.Millisecond}})
	v := e.createFake(t, "box")
	h, err := e.s.sys.Leases().Acquire(t.Context(), adminPrincipal, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.host.db.Exec(`UPDATE leases SET expires_at = 1 WHERE id = ?`, h.ID()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var l lease.Lease
		e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/leases/" + h.ID(), token: tokAdmin}).decode(t, &l)
		if l.Status == lease.StatusExpired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired lease is still %s: nothing swept it", l.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The tenancy flags: their defaults, and the values refused.
func TestTenancyFlags(t *testing.T) {
	t.Parallel()
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := limits{maxRunsPerCompany: 8, maxRunsPerPrincipal: 4, runTimeout: 15 * time.Minute, runRetention: 24 * time.Hour, sweepInterval: time.Minute, runClaimTTL: 30 * time.Second}
	if c.limits != want || c.sessionIdle != 30*time.Minute {
		t.Errorf("defaults %+v, idle %s; want %+v, 30m", c.limits, c.sessionIdle, want)
	}
	for _, args := range [][]string{
		{"-run-timeout", "61m"}, {"-run-timeout", "0s"}, {"-max-runs-per-company", "0"}, {"-max-runs-per-principal", "-1"},
		{"-session-idle", "0s"}, {"-run-retention", "0s"}, {"-sweep-interval", "-1s"}, {"-run-claim", "1s"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("parseFlags(%q) = %v, want an error naming the flag", args, err)
		}
	}
	if c, err := parseFlags([]string{"-sweep-interval", "0s"}, io.Discard); err != nil || c.limits.sweepInterval != 0 {
		t.Errorf("-sweep-interval 0 (no timer): %+v, %v", c, err)
	}
}
