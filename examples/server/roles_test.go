package main

import (
	"net/http"
	"testing"

	"github.com/berthdev/berth/environment"
)

// AUTH-1, CFG-2, PRB-7: an agent and a board member are refused every
// mutation and every probe (403 for a record they can read, 404 for one
// they cannot), and nothing changes; a company reads nothing of another's.
func TestRolesAreRefusedMutationsAndProbes(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, nil)
			v := e.createFake(t, "box")
			e.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/acme/assignments/workspace/ws1", token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
			run := e.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": v.ID, "argv": []string{"echo", "hi"}})
			run = e.waitRun(t, "acme", run.ID, tokAdmin, ended)
			env := "/api/v1/environments/" + v.ID
			c := "/api/v1/companies/acme"
			rev := map[string]string{"If-Match": `"1"`}
			mutations := []call{
				{method: "POST", path: "/api/v1/environments", body: map[string]any{"name": "x", "driver": "fake"}},
				{method: "PATCH", path: env, header: rev, body: map[string]any{"description": "x"}},
				{method: "DELETE", path: env, header: rev},
				{method: "POST", path: env + "/archive", header: rev},
				{method: "POST", path: env + "/restore", header: rev},
				{method: "GET", path: env + "/blast-radius"},
				{method: "POST", path: env + "/health"},
				{method: "POST", path: "/api/v1/sweep"},
				{method: "POST", path: c + "/environments/" + v.ID + "/probe"},
				{method: "POST", path: c + "/probes", body: map[string]any{"driver": "fake"}},
				{method: "PUT", path: c + "/assignments/workspace/ws2", body: map[string]any{"environmentId": v.ID}},
				{method: "DELETE", path: c + "/assignments/workspace/ws1", header: rev},
				{method: "PUT", path: c + "/auth-checks/secret:abc@v1", body: map[string]any{"environmentId": v.ID, "status": "succeeded"}},
				{method: "DELETE", path: c + "/auth-checks/secret:abc@v1"},
				{method: "POST", path: c + "/runs", body: map[string]any{"environmentId": v.ID, "argv": []string{"echo"}}},
			}
			for _, tok := range []string{tokAgent, tokBoard} {
				for _, m := range append(mutations, call{method: "POST", path: c + "/leases/" + run.Lease + "/release"}) {
					if tok == tokAgent && m.path == c+"/leases/"+run.Lease+"/release" {
						continue // agents release their company's leases (ASG-3)
					}
					m.token = tok
					r := e.do(t, m)
					if r.status != http.StatusForbidden && r.status != http.StatusNotFound {
						t.Errorf("%s: %s %s = %d, want 403 or 404: %s", tok[:5], m.method, m.path, r.status, r.body)
					}
				}
				// Records they can read are 403, not 404.
				r := e.do(t, call{method: "PATCH", path: env, header: rev, token: tok, body: map[string]any{"description": "x"}})
				if r.status != http.StatusForbidden || r.err(t).Code != "denied" {
					t.Errorf("%s: PATCH of a readable environment = %d %s, want 403 denied", tok[:5], r.status, r.body)
				}
			}
			var got environment.View
			e.must(t, http.StatusOK, call{method: "GET", path: env, token: tokAdmin}).decode(t, &got)
			if got.Revision != 1 || got.Description != "" || got.Status != environment.StatusActive {
				t.Errorf("the refused mutations changed the environment: %+v", got)
			}

			// Cross-company: globex reads nothing of acme's.
			for _, p := range []string{c + "/leases/" + run.Lease, c + "/runs/" + run.ID, c + "/assignments/workspace/ws1", "/api/v1/companies/globex/leases/" + run.Lease} {
				if r := e.do(t, call{method: "GET", path: p, token: tokGlobex}); r.status != http.StatusNotFound && r.status != http.StatusForbidden {
					t.Errorf("globex GET %s = %d: %s", p, r.status, r.body)
				}
			}
			var lp struct {
				Items []map[string]any `json:"items"`
			}
			if r := e.do(t, call{method: "GET", path: c + "/leases", token: tokGlobex}); r.status == http.StatusOK {
				r.decode(t, &lp)
				if len(lp.Items) != 0 {
					t.Errorf("globex lists acme's leases: %s", r.body)
				}
			}
			e.must(t, http.StatusOK, call{method: "GET", path: c + "/leases/" + run.Lease, token: tokBoard})
			e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/companies/globex/leases/" + run.Lease, token: tokAdmin})
		})
	}
}
