package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
)

// Issue 56 over HTTP: the settings carry minimumIsolation and an
// environment requireIsolation (create, patch, read); a target below the
// minimum is listed unavailable and its probe fails with
// isolation_below_minimum; a value that is no level is a 400 naming the
// field.
func TestIsolationSettingsOverHTTP(t *testing.T) {
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{fake.New(&fake.Options{Isolation: drivers.IsolationContainer})}})
	var v environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "box", "driver": "fake", "requireIsolation": "gvisor"}}).decode(t, &v)
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + v.ID, token: tokAdmin}).decode(t, &v)
	if v.RequireIsolation != drivers.IsolationGVisor || v.Isolation != drivers.IsolationContainer || !strings.Contains(v.Unavailable, "below the minimum gvisor") {
		t.Errorf("created: requireIsolation %s, isolation %s, unavailable %q", v.RequireIsolation, v.Isolation, v.Unavailable)
	}
	id := v.ID
	v = environment.View{}
	e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/environments/" + id, token: tokAdmin,
		header: map[string]string{"If-Match": `"1"`}, body: map[string]any{"requireIsolation": "none"}}).decode(t, &v)
	if v.RequireIsolation != drivers.IsolationNone || v.Unavailable != "" {
		t.Errorf("patched to none: requireIsolation %s, unavailable %q", v.RequireIsolation, v.Unavailable)
	}
	bad := call{method: "PATCH", path: "/api/v1/settings", token: tokAdmin, header: map[string]string{"If-Match": `"0"`},
		raw: true, body: `{"minimumIsolation": "vm"}`}
	if er := e.must(t, http.StatusBadRequest, bad).err(t); !strings.Contains(er.Message, `isolation level "vm"`) {
		t.Errorf("minimumIsolation vm: %+v", er)
	}
	var st instance.Settings
	e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/settings", token: tokOperator, header: map[string]string{"If-Match": `"0"`},
		body: map[string]any{"minimumIsolation": "gvisor"}}).decode(t, &st)
	if st.MinimumIsolation != drivers.IsolationGVisor {
		t.Fatalf("settings after the update: %+v", st)
	}
	r := e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/settings", token: tokAgent})
	if !strings.Contains(string(r.body), `"minimumIsolation":"gvisor"`) {
		t.Errorf("settings JSON: %s", r.body)
	}
	v = environment.View{}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + id, token: tokAdmin}).decode(t, &v)
	if !strings.Contains(v.Unavailable, "minimumIsolation") {
		t.Errorf("under a gvisor minimum the container target reads unavailable %q", v.Unavailable)
	}
	// The listings mark what is below the minimum (issue 56): the
	// driver at its defaults, the environment with its reason.
	var ds struct {
		Items []struct {
			Name         string `json:"name"`
			Isolation    string `json:"isolation"`
			BelowMinimum string `json:"belowMinimum"`
		} `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/drivers", token: tokAgent}).decode(t, &ds)
	if len(ds.Items) != 1 || ds.Items[0].Isolation != "container" || !strings.Contains(ds.Items[0].BelowMinimum, "below the minimum gvisor") {
		t.Errorf("drivers under a gvisor minimum: %+v", ds.Items)
	}
	var list struct {
		Items []environment.View `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments", token: tokAdmin}).decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].Isolation != drivers.IsolationContainer || !strings.Contains(list.Items[0].Unavailable, "below the minimum gvisor") {
		t.Errorf("environments under a gvisor minimum: %+v", list.Items)
	}
	var res struct {
		OK   bool   `json:"ok"`
		Code string `json:"code"`
	}
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/environments/" + id + "/probe", token: tokOperator}).decode(t, &res)
	if res.OK || res.Code != "isolation_below_minimum" {
		t.Errorf("probe under a gvisor minimum: %+v", res)
	}
}
