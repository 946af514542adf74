package main

import (
	"net/http"
	"testing"

	"github.com/berthdev/berth/lease"
)

// runIDs lists the ids of company's runs in state as token reads them.
func (e *tenv) runIDs(t testing.TB, company, state, token string) map[string]runView {
	t.Helper()
	var page struct {
		Items []runView `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/" + company + "/runs" + map[bool]string{true: "?state=" + state}[state != ""], token: token}).decode(t, &page)
	out := map[string]runView{}
	for _, v := range page.Items {
		out[v.ID] = v
	}
	return out
}

// Runs live in the server's tables: a run started on one replica is read,
// listed (GET …/runs?state=) and stopped with proof through another
// replica on the same PostgreSQL; the stop goes to the replica that holds
// the run, which releases its lease with a receipt. Another company's
// board member lists none of them.
func TestRunsAreReadableAndStoppableFromEveryReplica(t *testing.T) {
	e := newEnv(t, "postgres", nil)
	other := e.restart(t, testTokens)
	v := e.createFake(t, "box")
	long := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}})
	e.waitRun(t, "acme", long.ID, tokAdmin, func(v runView) bool { return v.Status == runRunning })
	got := other.waitRun(t, "acme", long.ID, tokAdmin, func(v runView) bool { return true })
	if got.Status != runRunning || got.Lease == "" || got.Task == "" {
		t.Errorf("the run read on the other replica: %+v", got)
	}
	if _, ok := other.runIDs(t, "acme", "live", tokAdmin)[long.ID]; !ok {
		t.Errorf("the other replica does not list the live run")
	}
	if _, ok := other.runIDs(t, "acme", "ended", tokAdmin)[long.ID]; ok {
		t.Errorf("the other replica lists the live run as ended")
	}
	if n := len(other.runIDs(t, "globex", "", tokGlobex)); n != 0 {
		t.Errorf("globex lists %d runs", n)
	}
	e.must(t, http.StatusBadRequest, call{method: "GET", path: "/api/v1/companies/acme/runs?state=nonsense", token: tokAdmin, raw: true})
	var stopped runView
	other.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + long.ID + "/stop", token: tokAdmin}).decode(t, &stopped)
	if stopped.Status != runStopped || len(stopped.Proofs) != 1 || !stopped.Proofs[0].Complete || stopped.Proofs[0].Evidence != "runner_attested" ||
		stopped.Receipt == nil || stopped.Receipt.Cleanup != lease.CleanupConfirmed {
		t.Errorf("the run stopped through the other replica: %+v", stopped)
	}
	if _, ok := e.runIDs(t, "acme", runStopped, tokAdmin)[long.ID]; !ok {
		t.Errorf("the stopped run is not listed as stopped")
	}
}
