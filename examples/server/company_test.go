package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/lease"
)

// waitRun polls a run until it ends (no timing is asserted: the bound
// only keeps a broken run from hanging the test).
func (e *tenv) waitRun(t testing.TB, company, id, token string, until func(runView) bool) runView {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var v runView
		e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/" + company + "/runs/" + id, token: token}).decode(t, &v)
		if until(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is still %s", id, v.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ended(v runView) bool { return v.EndedAt != nil }

// startRun starts argv on env for company as token.
func (e *tenv) startRun(t testing.TB, company, token string, body map[string]any) runView {
	t.Helper()
	var v runView
	e.must(t, http.StatusAccepted, call{method: "POST", path: "/api/v1/companies/" + company + "/runs", token: token, body: body}).decode(t, &v)
	return v
}

// PRB-5: a saved probe as JSON and as progress events then the result;
// a draft probe; the qualification read.
func TestProbes(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	var res probejson.Result
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/environments/" + v.ID + "/probe", token: tokOperator}).decode(t, &res)
	if !res.OK || res.Platform.OS == "" {
		t.Errorf("probe %+v", res)
	}
	r := e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/environments/" + v.ID + "/probe", token: tokAdmin,
		header: map[string]string{"Accept": "text/event-stream"}, body: map[string]any{}})
	evs := events(r.body)
	if len(evs) < 2 || evs[0][0] != "stage" || evs[len(evs)-1][0] != "result" || !strings.Contains(evs[len(evs)-1][1], `"ok":true`) {
		t.Errorf("probe events %q", evs)
	}
	if r.header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("Content-Type %q", r.header.Get("Content-Type"))
	}
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/probes", token: tokAdmin,
		body: map[string]any{"driver": "fake", "config": map[string]any{}}}).decode(t, &res)
	if !res.OK || !res.Draft {
		t.Errorf("draft probe %+v", res)
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/environments/" + v.ID + "/qualification", token: tokAdmin})
	if !strings.Contains(e.logs.String(), "action=probe environment="+v.ID) {
		t.Error("no audit line for the probe")
	}
}

// ASG-1..5: set, show, resolve (which binding won), list, clear.
func TestAssignmentsAndResolve(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, nil)
			v := e.createFake(t, "box")
			path := "/api/v1/companies/acme/assignments/workspace/ws1"
			r := e.must(t, http.StatusOK, call{method: "PUT", path: path, token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
			if r.header.Get("ETag") != `"1"` {
				t.Errorf("binding ETag %q", r.header.Get("ETag"))
			}
			e.must(t, http.StatusConflict, call{method: "PUT", path: path, token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
			var b environment.Binding
			e.must(t, http.StatusOK, call{method: "GET", path: path, token: tokBoard}).decode(t, &b)
			if b.EnvironmentID != v.ID || b.Company != "acme" {
				t.Errorf("binding %+v", b)
			}
			var res environment.Resolution
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/resolve", token: tokAgent,
				body: map[string]any{"workspace": "ws1", "required": []string{"exec"}}}).decode(t, &res)
			if res.Binding.Kind != environment.BindingWorkspace || res.Environment.ID != v.ID {
				t.Errorf("resolution %+v", res)
			}
			var p page[environment.Binding]
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/assignments", token: tokBoard}).decode(t, &p)
			if len(p.Items) != 1 {
				t.Errorf("assignments %+v", p)
			}
			// Another company sees nothing of acme's binding.
			if r := e.do(t, call{method: "GET", path: path, token: tokGlobex}); r.status != http.StatusNotFound && r.status != http.StatusForbidden {
				t.Errorf("globex reads acme's binding: %d %s", r.status, r.body)
			}
			if r := e.do(t, call{method: "GET", path: "/api/v1/companies/globex/assignments/workspace/ws1", token: tokAdmin}); r.status != http.StatusNotFound {
				t.Errorf("acme's binding read under globex: %d %s", r.status, r.body)
			}
			// Binding keys are per company: globex binds its own ws1, and
			// each company's path reads its own (issue 51).
			gpath := "/api/v1/companies/globex/assignments/workspace/ws1"
			w := e.createFake(t, "globex-box")
			e.must(t, http.StatusOK, call{method: "PUT", path: gpath, token: tokAdmin, body: map[string]any{"environmentId": w.ID}})
			var gb environment.Binding
			e.must(t, http.StatusOK, call{method: "GET", path: gpath, token: tokGlobex}).decode(t, &gb)
			if gb.EnvironmentID != w.ID || gb.Company != "globex" {
				t.Errorf("globex's ws1 binding %+v", gb)
			}
			e.must(t, http.StatusNoContent, call{method: "DELETE", path: path, token: tokAdmin, header: map[string]string{"If-Match": `"1"`}})
			e.must(t, http.StatusOK, call{method: "GET", path: gpath, token: tokAdmin})
			e.must(t, http.StatusNotFound, call{method: "POST", path: "/api/v1/companies/acme/resolve", token: tokAdmin, body: map[string]any{"workspace": "ws1"}})
		})
	}
}

// A run on the fake through the runner: output, exit, receipt; SSE output
// from an offset; stop with proof; an agent runs through its binding.
func TestRunsOnTheFake(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	run := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"echo", "hi"}})
	done := e.waitRun(t, "acme", run.ID, tokAdmin, ended)
	if done.Status != runExited || done.Exit == nil || done.Exit.Code != 0 || done.Receipt == nil || done.Receipt.Cleanup != "confirmed" {
		t.Fatalf("run %+v", done)
	}
	var out struct {
		Items []outputChunk `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/runs/" + run.ID + "/output?from=0", token: tokAdmin}).decode(t, &out)
	if len(out.Items) == 0 || out.Items[0].Text != "hi\n" {
		t.Errorf("output %+v", out.Items)
	}
	r := e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/runs/" + run.ID + "/output?from=0", token: tokAdmin,
		header: map[string]string{"Accept": "text/event-stream"}})
	evs := events(r.body)
	if len(evs) < 2 || evs[0][0] != "output" || !strings.Contains(evs[0][1], `"text":"hi\n"`) || evs[len(evs)-1][0] != "end" {
		t.Errorf("output events %q", evs)
	}
	r = e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/runs/" + run.ID + "/output?from=" + itoa(out.Items[0].Seq), token: tokAdmin,
		header: map[string]string{"Accept": "text/event-stream"}})
	if evs := events(r.body); len(evs) != 1 || evs[0][0] != "end" {
		t.Errorf("output events after the last chunk %q", evs)
	}

	// Stop with proof.
	long := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}})
	e.waitRun(t, "acme", long.ID, tokAdmin, func(v runView) bool { return v.Status != runStarting })
	var stopped runView
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + long.ID + "/stop", token: tokAdmin}).decode(t, &stopped)
	if stopped.Status != runStopped || len(stopped.Proofs) != 1 || !stopped.Proofs[0].Complete || stopped.Proofs[0].Evidence != "runner_attested" ||
		stopped.Receipt == nil || stopped.Receipt.Cleanup != "confirmed" {
		t.Errorf("stopped run %+v", stopped)
	}

	// An agent runs through its workspace's binding, not by id.
	e.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/acme/assignments/workspace/ws1", token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
	ar := e.startRun(t, "acme", tokAgent, map[string]any{"workspace": "ws1", "argv": []string{"echo", "agent"}})
	if d := e.waitRun(t, "acme", ar.ID, tokAgent, ended); d.Status != runExited {
		t.Errorf("the agent's run %+v", d)
	}
	e.must(t, http.StatusForbidden, call{method: "POST", path: "/api/v1/companies/acme/runs", token: tokAgent, body: map[string]any{"environmentId": v.ID, "argv": []string{"echo"}}})
	// Another company reads nothing of acme's runs.
	e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/companies/acme/runs/" + run.ID, token: tokGlobex})
	e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/companies/globex/runs/" + run.ID, token: tokAdmin})

	// Idempotency-Key on runs: the retry returns the first run.
	rc := call{method: "POST", path: "/api/v1/companies/acme/runs", token: tokAdmin, header: map[string]string{"Idempotency-Key": "r1"},
		body: map[string]any{"environmentId": v.ID, "argv": []string{"echo", "once"}}}
	var r1, r2 runView
	e.must(t, http.StatusAccepted, rc).decode(t, &r1)
	e.must(t, http.StatusAccepted, rc).decode(t, &r2)
	if r1.ID != r2.ID {
		t.Errorf("a retried run with the same key started %s beside %s", r2.ID, r1.ID)
	}
	e.waitRun(t, "acme", r1.ID, tokAdmin, ended)
}

// Shutdown with a run in flight: the task is stopped with proof and its
// ephemeral lease released.
func TestShutdownStopsRuns(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	long := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}})
	e.waitRun(t, "acme", long.ID, tokAdmin, func(v runView) bool { return v.Status != runStarting })
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
	rn, err := e.s.runs.get(t.Context(), adminPrincipal, "acme", long.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := rn.snapshot()
	if got.Status != runStopped || len(got.Proofs) != 1 || !got.Proofs[0].Complete || got.Receipt == nil || got.Receipt.Cleanup != "confirmed" {
		t.Errorf("after shutdown the run is %+v", got)
	}
	ls, err := e.s.stores.Leases.ListLeases(t.Context(), lease.Filter{Live: true})
	if err != nil || len(ls) != 0 {
		t.Errorf("live leases after shutdown: %v, %v", ls, err)
	}
	if _, err := e.s.runs.start(t.Context(), adminPrincipal, "acme", runBody{EnvironmentID: v.ID, Argv: []string{"echo"}}); err == nil {
		t.Error("a run started after shutdown")
	}
}
