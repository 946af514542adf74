package main

import (
	"bufio"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/berthdev/berth/handover"
)

// A principal holds at most -max-streams open event streams; others are
// not affected; a closed stream frees its slot.
func TestEventStreamLimit(t *testing.T) {
	e := newEnv(t, "sqlite", &envOpts{maxStreams: 1})
	v := e.createFake(t, "box")
	long := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"sleep", "600"}})
	e.waitRun(t, "acme", long.ID, tokAdmin, func(v runView) bool { return v.Status != runStarting })
	out := "/api/v1/companies/acme/runs/" + long.ID + "/output"
	req, _ := http.NewRequest("GET", e.ts.URL+out, nil)
	req.Header.Set("Authorization", "Bearer "+tokAdmin)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the first stream = %d", res.StatusCode)
	}
	if er := e.must(t, http.StatusTooManyRequests, call{method: "GET", path: out, token: tokAdmin, header: map[string]string{"Accept": "text/event-stream"}}).err(t); er.Code != "unavailable" {
		t.Errorf("the second stream: %+v", er)
	}
	// Another principal has its own slots.
	done := make(chan *resp, 1)
	go func() {
		done <- e.do(t, call{method: "GET", path: out, token: tokOperator, header: map[string]string{"Accept": "text/event-stream"}})
	}()
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + long.ID + "/stop", token: tokAdmin})
	if r := <-done; r.status != http.StatusOK || !strings.Contains(string(r.body), "event: end") {
		t.Errorf("the operator's stream = %d %s", r.status, r.body)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
	}
	res.Body.Close()
	e.waitRun(t, "acme", long.ID, tokAdmin, ended)
	// The first stream ended, so its slot is free again.
	e.must(t, http.StatusOK, call{method: "GET", path: out, token: tokAdmin, header: map[string]string{"Accept": "text/event-stream"}})
}

// AUTH-2: record, show, list and clear a project auth check; the health
// refresh of a saved environment.
func TestAuthChecksAndHealth(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, nil)
			v := e.createFake(t, "box")
			ref, err := e.s.sys.Secrets().Put(t.Context(), "managed-account", "account", "account-secret-value")
			if err != nil {
				t.Fatal(err)
			}
			path := "/api/v1/companies/acme/auth-checks/" + url.PathEscape(ref.String())
			var rec handover.AuthCheck
			e.must(t, http.StatusOK, call{method: "PUT", path: path, token: tokOperator,
				body: map[string]any{"environmentId": v.ID, "projects": []string{"p2", "p1"}, "status": "succeeded"}}).decode(t, &rec)
			if rec.Status != handover.StatusSucceeded || strings.Join(rec.Projects, ",") != "p1,p2" || rec.Environment != v.ID {
				t.Errorf("recorded %+v", rec)
			}
			e.must(t, http.StatusOK, call{method: "GET", path: path, token: tokAdmin}).decode(t, &rec)
			var p page[handover.AuthCheck]
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/auth-checks", token: tokAdmin}).decode(t, &p)
			if len(p.Items) != 1 {
				t.Errorf("auth checks %+v", p)
			}
			e.must(t, http.StatusBadRequest, call{method: "PUT", path: path, token: tokOperator, raw: true, body: map[string]any{"environmentId": v.ID, "status": "maybe"}})
			e.must(t, http.StatusNoContent, call{method: "DELETE", path: path, token: tokOperator})
			e.must(t, http.StatusNotFound, call{method: "GET", path: path, token: tokAdmin})
			if strings.Contains(string(e.bodies), "account-secret-value") || strings.Contains(e.logs.String(), "account-secret-value") {
				t.Error("the managed account's value was shown")
			}

			var h map[string]any
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/environments/" + v.ID + "/health", token: tokOperator}).decode(t, &h)
			if h["status"] != "available" {
				t.Errorf("health %v", h)
			}
		})
	}
}
