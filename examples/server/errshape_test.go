package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/internal/errtable"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/templates"
)

// Provoked failures through the API: the rows of internal/errtable (shared
// with the library's TestFailuresSpeakToPeople and envctl's
// TestErrorLinesSpeakToPeople), against a real sshd, the Docker client
// against a closed port and the fake Daytona API, plus the API's own rows.
// Each refusal carries the coarse code, the reason, one sentence of at
// most 200 characters naming the target (no requirement ID, no Go
// identifier), and the chain as the detail (issue 50 items 4 and 5). A
// failed probe is a 200 answer whose result's code is the reason (its
// coarse code is the one docs/errors.md gives for it), its message the
// sentence and its failed stage's error the detail.
func TestErrorShapeTable(t *testing.T) {
	t.Parallel()
	fx := errtable.NewFixture(t, "registry.fake.test/team/app:v1", "k-0123456789")
	fk := fake.New(&fake.Options{APIKey: fx.FakeKey})
	fk.AddImage(fx.FakeMutableImage)
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{ssh.New(nil), docker.New(nil), fk,
		daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond})}})

	type spoken struct{ code, reason, message, detail string }
	ofError := func(er apiError) spoken { return spoken{er.Code, er.Reason, er.Message, er.Detail} }
	create := func(t *testing.T, env errtable.Env) environment.View {
		var v environment.View
		e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
			body: map[string]any{"name": env.Name, "driver": env.Driver, "config": env.Config}}).decode(t, &v)
		return v
	}
	probeOf := func(t *testing.T, env errtable.Env) probejson.Result {
		var res probejson.Result
		e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/environments/" + create(t, env).ID + "/probe",
			token: tokAdmin, body: map[string]any{}}).decode(t, &res)
		return res
	}
	provoke := func(t *testing.T, r errtable.Row) spoken {
		switch r.Action {
		case errtable.Probe:
			res := probeOf(t, r.Env)
			if res.OK {
				t.Fatalf("the probe succeeded: %s", res.Summary)
			}
			s := spoken{reason.Code(res.Code).String(), res.Code, res.Message, ""}
			for _, st := range res.Stages {
				if !st.OK && !st.Skipped {
					s.detail = st.Error
					break
				}
			}
			return s
		case errtable.Create:
			return ofError(e.must(t, http.StatusBadRequest, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				body: map[string]any{"name": r.Env.Name, "driver": r.Env.Driver, "config": r.Env.Config}}).err(t))
		case errtable.Qualify:
			res := probeOf(t, r.Env)
			d := res.QualificationDiagnostic
			if !res.OK || d == nil {
				t.Fatalf("probe: %+v", res)
			}
			return spoken{qualify.ErrorCode(d.Code).String(), d.Code, d.Message, res.Summary}
		case errtable.Setup:
			return ofError(e.must(t, http.StatusUnprocessableEntity, call{method: "POST", path: "/api/v1/environments/" + create(t, r.Env).ID + "/setup-sessions",
				token: tokOperator, body: map[string]any{"name": "tpl"}}).err(t))
		case errtable.StoppedTerminal:
			var ses templates.Session
			e.must(t, http.StatusAccepted, call{method: "POST", path: "/api/v1/environments/" + create(t, r.Env).ID + "/setup-sessions",
				token: tokOperator, body: map[string]any{"name": "typed", "interactive": true}}).decode(t, &ses)
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/setup-sessions/" + ses.ID + "/cancel", token: tokOperator})
			return ofError(e.must(t, http.StatusConflict, call{method: "POST", path: "/api/v1/setup-sessions/" + ses.ID + "/terminal-token", token: tokOperator}).err(t))
		case errtable.Quota:
			// The API leases through runs: with a quota of one live lease
			// per company, a second run of acme is refused (429) while the
			// first holds its lease. The instance's quotas are put back
			// after (the other rows run after this one, on their own
			// environments).
			var st struct {
				Revision int `json:"revision"`
			}
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/settings", token: tokAdmin}).decode(t, &st)
			setQuota := func(perCompany int, rev int) {
				e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/settings", token: tokAdmin,
					header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, rev)}, body: map[string]any{"quotaPerCompany": perCompany}})
			}
			setQuota(1, st.Revision)
			defer setQuota(8, st.Revision+1)
			env := create(t, r.Env)
			run := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": env.ID, "argv": []string{"sleep", "600"}})
			defer e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + run.ID + "/stop", token: tokAdmin})
			res := e.must(t, http.StatusTooManyRequests, call{method: "POST", path: "/api/v1/companies/acme/runs", token: tokAdmin,
				body: map[string]any{"environmentId": env.ID, "argv": []string{"true"}}})
			if got := res.header.Get("Retry-After"); got != "5" {
				t.Errorf("Retry-After = %q, want 5", got)
			}
			return ofError(res.err(t))
		}
		t.Fatalf("row %q: action %d is not provoked here", r.Name, r.Action)
		return spoken{}
	}
	check := func(t *testing.T, r errtable.Row, got spoken) {
		t.Helper()
		for _, p := range errtable.Check(r, got.code, got.reason, got.message, got.detail) {
			t.Error(p)
		}
		t.Logf("%s (%s): %s\n\tdetail: %s", got.code, got.reason, got.message, got.detail)
	}

	box := create(t, errtable.Env{Name: "box", Driver: "fake", Config: map[string]any{"api_key": fx.FakeKey}})
	for _, tc := range []struct {
		row    errtable.Row
		call   call
		status int
	}{
		{errtable.Row{Name: "stale revision", Code: "conflict", Reason: "stale_revision", Target: `"box"`, InChain: "stale revision 7"},
			call{method: "PATCH", path: "/api/v1/environments/" + box.ID, token: tokAdmin, header: map[string]string{"If-Match": `"7"`},
				body: map[string]any{"description": "d"}}, 412},
		{errtable.Row{Name: "denied", Code: "denied", Target: `"box"`, InChain: "permission denied"},
			call{method: "POST", path: "/api/v1/environments/" + box.ID + "/archive", token: tokBoard, header: map[string]string{"If-Match": `"1"`}}, 403},
		{errtable.Row{Name: "not found", Code: "not_found", Target: "env_nope", InChain: "not found"},
			call{method: "GET", path: "/api/v1/environments/env_nope", token: tokAdmin}, 404},
	} {
		t.Run(tc.row.Name, func(t *testing.T) { check(t, tc.row, ofError(e.must(t, tc.status, tc.call).err(t))) })
	}
	for _, r := range errtable.Rows(fx) {
		t.Run(r.Name, func(t *testing.T) { check(t, r, provoke(t, r)) })
	}
}
