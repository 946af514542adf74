package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
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
// replica on the same PostgreSQL, and its lease expires with its
// deadline (plus runLeaseMargin), not the lease TTL; the stop goes to the replica that holds
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
	// The run's lease expires with the run: its deadline plus the margin.
	var l lease.Lease
	other.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/leases/" + got.Lease, token: tokAdmin}).decode(t, &l)
	if want := got.Deadline.Add(runLeaseMargin); !l.ExpiresAt.Equal(want) {
		t.Errorf("the run's lease expires at %s, want its deadline plus %s: %s", l.ExpiresAt, runLeaseMargin, want)
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
		stopped.Receipt == nil || stopped.Receipt.Cleanup != "confirmed" {
		t.Errorf("the run stopped through the other replica: %+v", stopped)
	}
	if _, ok := e.runIDs(t, "acme", runStopped, tokAdmin)[long.ID]; !ok {
		t.Errorf("the stopped run is not listed as stopped")
	}
}

// A run on a local lease cannot be taken over by another replica: the
// lease's sandbox is the process that acquired it (another manager's
// Manager.Open refuses it; an SSH lease is reopened instead). When its
// server's claim lapsed, the other replica's maintenance marks the run
// lost, naming why and what ends its processes, instead of leaving it
// running forever in the list. Real runner on the local driver.
func TestRunOnAHostLeaseIsMarkedLostWhenItsServerIsGone(t *testing.T) {
	spec, err := runnerSpecOf(testenv.RunnerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{local.New(nil)}, runnerSet: drivers.RunnerSetOf(spec)})
	var envs struct {
		Items []environment.View `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments", token: tokAdmin}).decode(t, &envs)
	if len(envs.Items) != 1 {
		t.Fatalf("environments %+v, want the managed local one", envs.Items)
	}
	run := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": envs.Items[0].ID, "argv": []string{"sleep", "600"}})
	e.waitRun(t, "acme", run.ID, tokAdmin, func(v runView) bool { return v.Status == runRunning })
	// The server that ran it is gone: its claim lapsed.
	if _, err := e.s.host.db.ExecContext(t.Context(), `UPDATE server_runs SET holder = 'gone', holder_until = 0 WHERE id = ?`, run.ID); err != nil {
		t.Fatal(err)
	}
	set, err := parseTokens("tokens.json", []byte(testTokens))
	if err != nil {
		t.Fatal(err)
	}
	other := e.restartOpts(t, set, 4, limits{}, local.New(nil))
	if n, err := other.s.runs.takeOver(t.Context()); n != 1 || err != nil {
		t.Fatalf("took over %d runs, %v", n, err)
	}
	got := other.waitRun(t, "acme", run.ID, tokAdmin, ended)
	if got.Status != runLost || got.Error == nil || !strings.Contains(got.Error.Message+got.Error.Detail, "host lease") {
		t.Errorf("the run of a gone server on a host lease: %+v (error %+v)", got, got.Error)
	}
}

// A replica that finds another one holding a run it follows (it was cut
// off from the database past the claim's expiry, and the run was taken
// over) lets go of it: it stops nothing and releases nothing, so the
// replica that took it over is not undone; the lease stays active.
func TestAReplicaLetsGoOfARunAnotherTookOver(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	run := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}})
	e.waitRun(t, "acme", run.ID, tokAdmin, func(v runView) bool { return v.Status == runRunning })
	e.s.runs.mu.Lock()
	rn := e.s.runs.byID[run.ID]
	e.s.runs.mu.Unlock()
	if _, err := e.s.host.db.ExecContext(t.Context(), `UPDATE server_runs SET holder = 'another-replica' WHERE id = ?`, run.ID); err != nil {
		t.Fatal(err)
	}
	select { // the heartbeat (every second) sees it; the bound only ends a hung test
	case <-rn.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the replica still follows the run another one took over")
	}
	got := e.waitRun(t, "acme", run.ID, tokAdmin, func(runView) bool { return true })
	if got.EndedAt != nil || len(got.Proofs) != 0 || got.Receipt != nil {
		t.Errorf("the run another replica holds was ended here: %+v", got)
	}
	var l lease.Lease
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/leases/" + got.Lease, token: tokAdmin}).decode(t, &l)
	if l.Status != lease.StatusActive {
		t.Errorf("the lease of the run another replica holds: %s, want active", l.Status)
	}
}
