package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
)

// CFG-9 over HTTP: every known role reads the instance settings, only
// instance admins and local operators change them at the If-Match revision
// (missing 428, stale 412, nothing changed); with environments disabled a
// probe is refused while catalog reads and edits go on, and with
// managed-sandbox-only on the drivers listing marks host drivers
// unavailable.
func TestInstanceSettings(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, &envOpts{drivers: []drivers.Driver{fake.New(nil), local.New(nil)}})
			v := e.createFake(t, "box")
			var st instance.Settings
			r := e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/settings", token: tokAgent})
			r.decode(t, &st)
			if !st.EnableEnvironments || st.ManagedSandboxOnly || st.Revision != 0 || r.header.Get("ETag") != `"0"` ||
				st.QuotaPerCompany != 8 || st.QuotaPerCompanyEnvironment != 4 {
				t.Fatalf("the defaults: %+v (ETag %q)", st, r.header.Get("ETag"))
			}

			off := call{method: "PATCH", path: "/api/v1/settings", body: map[string]any{"enableEnvironments": false},
				header: map[string]string{"If-Match": `"0"`}}
			for _, tok := range []string{tokBoard, tokAgent} {
				off.token = tok
				e.must(t, http.StatusForbidden, off)
			}
			noMatch := off
			noMatch.token, noMatch.header, noMatch.raw = tokAdmin, nil, true
			e.must(t, http.StatusPreconditionRequired, noMatch)
			bad := off
			bad.token, bad.raw, bad.body = tokAdmin, true, `{"enableEnvironments": false, "colour": "red"}`
			if er := e.must(t, http.StatusBadRequest, bad).err(t); er.Field != "colour" {
				t.Errorf("an unknown field: %+v", er)
			}
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/settings", token: tokAdmin}).decode(t, &st)
			if !st.EnableEnvironments || st.Revision != 0 {
				t.Fatalf("refused updates changed the settings: %+v", st)
			}

			off.token = tokAdmin
			r = e.must(t, http.StatusOK, off)
			r.decode(t, &st)
			if st.EnableEnvironments || st.Revision != 1 || st.UpdatedBy == "" || r.header.Get("ETag") != `"1"` {
				t.Fatalf("after the update: %+v (ETag %q)", st, r.header.Get("ETag"))
			}
			if er := e.must(t, http.StatusPreconditionFailed, off).err(t); er.Code != "conflict" { // still "0"
				t.Errorf("a stale If-Match: %+v", er)
			}

			// Disabled: a probe is refused naming the setting; reads and edits go on.
			pr := e.must(t, http.StatusServiceUnavailable, call{method: "POST",
				path: "/api/v1/companies/acme/environments/" + v.ID + "/probe", token: tokOperator})
			if er := pr.err(t); er.Code != "unavailable" || !strings.Contains(er.Message, "enableEnvironments") {
				t.Errorf("a probe with environments disabled: %+v", er)
			}
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + v.ID, token: tokAdmin})
			e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/environments/" + v.ID, token: tokAdmin,
				header: map[string]string{"If-Match": `"1"`}, body: map[string]any{"description": "still editable"}})

			// Managed sandboxes only: the local driver is listed unavailable.
			e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/settings", token: tokOperator,
				header: map[string]string{"If-Match": `"1"`}, body: map[string]any{"enableEnvironments": true, "enableManagedSandboxOnly": true}}).decode(t, &st)
			if !st.EnableEnvironments || !st.ManagedSandboxOnly || st.Revision != 2 {
				t.Fatalf("after the second update: %+v", st)
			}
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/environments/" + v.ID + "/probe", token: tokOperator})
			var list struct {
				Items []struct {
					Name      string `json:"name"`
					Available bool   `json:"available"`
					Reason    string `json:"reason"`
				} `json:"items"`
			}
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/drivers", token: tokAdmin}).decode(t, &list)
			for _, d := range list.Items {
				host := d.Name == "local"
				if d.Available == host || host != strings.Contains(d.Reason, "enableManagedSandboxOnly") {
					t.Errorf("driver %s under managed-sandbox-only: available %t, reason %q", d.Name, d.Available, d.Reason)
				}
			}
			if len(list.Items) != 2 {
				t.Errorf("drivers listed: %+v", list.Items)
			}

			// The lease quotas are settings (issue 51): 0 lifts a limit;
			// only instance admins and local operators change them.
			q := call{method: "PATCH", path: "/api/v1/settings", token: tokAdmin, header: map[string]string{"If-Match": `"2"`},
				body: map[string]any{"quotaPerCompany": 0, "quotaPerCompanyEnvironment": 2}}
			e.must(t, http.StatusOK, q).decode(t, &st)
			if st.QuotaPerCompany != 0 || st.QuotaPerCompanyEnvironment != 2 || !st.ManagedSandboxOnly || st.Revision != 3 {
				t.Errorf("after the quota update: %+v", st)
			}
			q.header, q.body, q.token = map[string]string{"If-Match": `"3"`}, map[string]any{"quotaPerCompany": 100}, tokBoard
			e.must(t, http.StatusForbidden, q)

			// CFG-7: the managed local environment (created at start) shows
			// its protection in the blast radius and is never deleted.
			var locals struct {
				Items []environment.View `json:"items"`
			}
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments?driver=local", token: tokAdmin}).decode(t, &locals)
			if len(locals.Items) != 1 {
				t.Fatalf("local environments: %+v", locals.Items)
			}
			loc := locals.Items[0]
			var br environment.BlastRadius
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + loc.ID + "/blast-radius", token: tokAdmin}).decode(t, &br)
			if br.Protected == "" || br.Deletable() {
				t.Errorf("the managed local environment's blast radius: %+v", br)
			}
			e.must(t, http.StatusConflict, call{method: "DELETE", path: "/api/v1/environments/" + loc.ID, token: tokAdmin,
				header: map[string]string{"If-Match": `"` + strconv.FormatInt(loc.Revision, 10) + `"`}})
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + loc.ID, token: tokAdmin})
		})
	}
}
