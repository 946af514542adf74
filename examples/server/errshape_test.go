package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
)

var (
	requirementID = regexp.MustCompile(`(CFG|CAP|PRB|QUAL|IMG|LEASE|ASG|PRP|AUTH|UI|WS|ISO|PLG|SCALE)-[0-9]+`)
	goIdentifier  = regexp.MustCompile(`\b[a-z]+\.[A-Z]\w+`)
)

// Provoked failures through the API: each answer carries the coarse code,
// the reason, one sentence of at most 200 characters naming the target
// (no requirement ID, no Go identifier), and the chain as the detail
// (issue 50 items 4 and 5; the library's rows are the root package's
// TestFailuresSpeakToPeople).
func TestErrorShapeTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{fake.New(&fake.Options{APIKey: "k-0123456789"})}})
	var v environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "box", "driver": "fake", "config": map[string]any{"api_key": "k-0123456789"}}}).decode(t, &v)
	for _, tc := range []struct {
		name    string
		call    call
		status  int
		code    string
		reason  string
		target  string // the message names it
		inChain string // the detail keeps it
	}{
		{"missing credentials", call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
			body: map[string]any{"name": "keyless", "driver": "fake"}}, 400, "invalid", "missing_credentials", `"keyless"`, `field "api_key"`},
		{"stale revision", call{method: "PATCH", path: "/api/v1/environments/" + v.ID, token: tokAdmin, header: map[string]string{"If-Match": `"7"`},
			body: map[string]any{"description": "d"}}, 412, "conflict", "stale_revision", `"box"`, "stale revision 7"},
		{"denied", call{method: "POST", path: "/api/v1/environments/" + v.ID + "/archive", token: tokBoard, header: map[string]string{"If-Match": `"1"`}},
			403, "denied", "", `"box"`, "permission denied"},
		{"not found", call{method: "GET", path: "/api/v1/environments/env_nope", token: tokAdmin}, 404, "not_found", "", "env_nope", "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			er := e.must(t, tc.status, tc.call).err(t)
			if er.Code != tc.code || er.Reason != tc.reason {
				t.Errorf("code %q, reason %q; want %q, %q (%+v)", er.Code, er.Reason, tc.code, tc.reason, er)
			}
			m := er.Message
			switch {
			case m == "" || len([]rune(m)) > 200:
				t.Errorf("message of %d characters: %q", len([]rune(m)), m)
			case !strings.Contains(m, tc.target):
				t.Errorf("message %q does not name %s", m, tc.target)
			case requirementID.MatchString(m), goIdentifier.MatchString(m):
				t.Errorf("message %q holds a requirement ID or a Go identifier", m)
			}
			if !strings.Contains(er.Detail, tc.inChain) || er.Detail == m {
				t.Errorf("detail %q does not keep the chain (%q)", er.Detail, tc.inChain)
			}
		})
	}
}
