package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
)

// No route without an entry in the OpenAPI document, no entry without a
// route.
func TestRoutesMatchTheDocument(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	doc := loadDoc(t)
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	registered := map[string]bool{}
	for _, r := range e.s.routes {
		registered[r.method+" "+r.pattern] = true
		if !documented[r.method+" "+r.pattern] {
			t.Errorf("route %s %s has no entry in openapi.json", r.method, r.pattern)
		}
	}
	for k := range documented {
		if !registered[k] {
			t.Errorf("openapi.json documents %s, which the server does not register", k)
		}
	}
	if len(registered) < 30 {
		t.Fatalf("the walk saw %d routes; it looks at the wrong list", len(registered))
	}
	// The document is served.
	r := e.must(t, http.StatusOK, call{method: "GET", path: "/api/openapi.json"})
	if !strings.Contains(string(r.body), `"openapi": "3.0.3"`) {
		t.Errorf("GET /api/openapi.json served %.80s", r.body)
	}
}

// CFG-6: create (idempotent), read with an ETag, update with If-Match
// (missing 428, stale 412 conflict), validation naming the field with
// nothing saved, pagination, archive/restore, blast radius then delete.
func TestEnvironmentLifecycle(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, nil)
			create := call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				header: map[string]string{"Idempotency-Key": "k1"}, body: map[string]any{"name": "box", "driver": "fake"}}
			var v, again environment.View
			e.must(t, http.StatusCreated, create).decode(t, &v)
			replay := e.must(t, http.StatusCreated, create)
			replay.decode(t, &again)
			if again.ID != v.ID {
				t.Errorf("a retried create with the same Idempotency-Key made %s beside %s", again.ID, v.ID)
			}
			if replay.header.Get("ETag") != `"1"` || replay.header.Get("Location") != "/api/v1/environments/"+v.ID || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("the replay's headers %v", replay.header)
			}
			other := create
			other.body = map[string]any{"name": "box2", "driver": "fake"}
			if r := e.must(t, http.StatusConflict, other); r.err(t).Field != "Idempotency-Key" {
				t.Errorf("reusing a key for another request: %s", r.body)
			}

			r := e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + v.ID, token: tokAdmin})
			if r.header.Get("ETag") != `"1"` {
				t.Errorf("ETag %q, want \"1\"", r.header.Get("ETag"))
			}
			patch := call{method: "PATCH", path: "/api/v1/environments/" + v.ID, token: tokAdmin, body: map[string]any{"description": "d2"}}
			patch.raw = true
			e.must(t, http.StatusPreconditionRequired, patch)
			patch.raw = false
			patch.header = map[string]string{"If-Match": `"1"`}
			r = e.must(t, http.StatusOK, patch)
			if r.header.Get("ETag") != `"2"` {
				t.Errorf("ETag after the update %q, want \"2\"", r.header.Get("ETag"))
			}
			r = e.must(t, http.StatusPreconditionFailed, patch) // still "1"
			if er := r.err(t); er.Code != "conflict" || er.Field != "baseRevision" || er.Target == "" {
				t.Errorf("a stale If-Match: %+v", er)
			}

			// Unknown fields and bad values are refused, naming the field; nothing is saved.
			bad := call{method: "POST", path: "/api/v1/environments", token: tokAdmin, raw: true, body: `{"name":"x","driver":"fake","colour":"red"}`}
			if er := e.must(t, http.StatusBadRequest, bad).err(t); er.Field != "colour" || er.Code != "invalid" {
				t.Errorf("an unknown field: %+v", er)
			}
			bad.body = `{"name":"","driver":"fake"}`
			if er := e.must(t, http.StatusBadRequest, bad).err(t); er.Field != "name" {
				t.Errorf("an empty name: %+v", er)
			}
			bad.body = strings.Repeat(" ", maxBody+10) + "{}"
			e.must(t, http.StatusRequestEntityTooLarge, bad)

			for i := range 3 {
				e.createFake(t, fmt.Sprintf("more-%d", i))
			}
			var ids []string
			cursor := ""
			for range 10 {
				var p page[environment.View]
				e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments?driver=fake&limit=2&cursor=" + cursor, token: tokBoard}).decode(t, &p)
				for _, it := range p.Items {
					ids = append(ids, it.ID)
					if !it.Redacted {
						t.Errorf("a board member sees the full view of %s", it.ID)
					}
				}
				if cursor = p.NextCursor; cursor == "" {
					break
				}
			}
			if len(ids) != 4 || !slices.IsSorted(ids) || slices.Compact(slices.Clone(ids))[3] != ids[3] {
				t.Errorf("paging by 2 listed %v, want the 4 fake environments once each", ids)
			}
			e.must(t, http.StatusBadRequest, call{method: "GET", path: "/api/v1/environments?cursor=zzz", token: tokAdmin})

			arch := call{method: "POST", path: "/api/v1/environments/" + v.ID + "/archive", token: tokAdmin, header: map[string]string{"If-Match": `"2"`}}
			e.must(t, http.StatusOK, arch)
			e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/environments/" + v.ID + "/restore", token: tokAdmin, header: map[string]string{"If-Match": `"3"`}})

			var br environment.BlastRadius
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + v.ID + "/blast-radius", token: tokAdmin}).decode(t, &br)
			if br.EnvironmentID != v.ID || br.Revision != 4 || !br.Deletable() {
				t.Errorf("blast radius %+v", br)
			}
			e.must(t, http.StatusOK, call{method: "DELETE", path: "/api/v1/environments/" + v.ID, token: tokAdmin, header: map[string]string{"If-Match": `"4"`}})
			if er := e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/environments/" + v.ID, token: tokAdmin}).err(t); er.Code != "not_found" {
				t.Errorf("after delete: %+v", er)
			}
			e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/nothing", token: tokAdmin, raw: true})
			e.must(t, http.StatusMethodNotAllowed, call{method: "PUT", path: "/api/v1/environments", token: tokAdmin, raw: true})
			e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/environments"})
			e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/environments", token: "wrong-token-0123456789"})

			// The audit log names who did what.
			if !strings.Contains(e.logs.String(), `msg=audit who="instance_admin \"root\"" action=environment.delete environment=`+v.ID+" outcome=ok") {
				t.Errorf("no audit line for the delete in:\n%s", e.logs.String())
			}
		})
	}
}

// CAP-1: drivers with capabilities and availability, nothing allocated.
func TestDrivers(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	var d struct {
		Items []struct {
			Name      string `json:"name"`
			Available bool   `json:"available"`
		} `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/drivers", token: tokAgent}).decode(t, &d)
	if len(d.Items) != 1 || d.Items[0].Name != "fake" || !d.Items[0].Available {
		t.Errorf("drivers %+v", d.Items)
	}
}

// A required secret left out is the code invalid with the reason
// missing_credentials (400) on its
// field, at create and at update, on both stores, even beside another
// invalid field; other config errors stay invalid.
func TestMissingCredentialsCode(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, &envOpts{drivers: []drivers.Driver{fake.New(&fake.Options{APIKey: "k-0123456789"})}})
			create := call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
				body: map[string]any{"name": "keyless", "driver": "fake", "config": map[string]any{"cpus": 0}}}
			if er := e.must(t, http.StatusBadRequest, create).err(t); er.Code != "invalid" || er.Reason != "missing_credentials" || er.Field != "config.api_key" || er.Target != `environment "keyless"` ||
				!strings.Contains(er.Message, "api_key") {
				t.Errorf("create without the required api_key: %+v", er)
			}
			create.body = map[string]any{"name": "keyed", "driver": "fake", "config": map[string]any{"api_key": "k-0123456789", "cpus": 0}}
			if er := e.must(t, http.StatusBadRequest, create).err(t); er.Code != "invalid" || er.Field != "config.cpus" {
				t.Errorf("create with a bad cpus only: %+v", er)
			}
			create.body = map[string]any{"name": "keyed", "driver": "fake", "config": map[string]any{"api_key": "k-0123456789"}}
			var v environment.View
			e.must(t, http.StatusCreated, create).decode(t, &v)
			patch := call{method: "PATCH", path: "/api/v1/environments/" + v.ID, token: tokAdmin, header: map[string]string{"If-Match": `"1"`},
				body: map[string]any{"config": map[string]any{"region": "local-2"}}}
			if er := e.must(t, http.StatusBadRequest, patch).err(t); er.Code != "invalid" || er.Reason != "missing_credentials" || er.Field != "config.api_key" {
				t.Errorf("an update dropping the required api_key: %+v", er)
			}
			if strings.Contains(string(e.bodies), "k-0123456789") {
				t.Error("a response holds the api key")
			}
		})
	}
}
