package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/environment"
)

// TestAssignCommands drives assign set/show/resolve/clear: precedence
// workspace > project > agent > instance default (ASG-1), refusals that
// name the binding and never fall back (ASG-2, ASG-3), and clearing.
func TestAssignCommands(t *testing.T) {
	c := newCLI(t)
	ids := map[string]string{}
	for _, n := range []string{"ws-env", "proj-env", "agent-env", "default-env"} {
		ids[n] = c.createFake(n, `{}`)
	}
	host := c.t.TempDir()
	c.ok("env", "create", "--name", "host", "--driver", "local", "--config", writeFile(t, `{"workdir":"`+host+`"}`))

	wantContains(t, "set", c.ok("assign", "set", "workspace", "ws1", "ws-env", "--company", "acme"),
		`workspace ws1 binding of company "acme"`, ids["ws-env"])
	c.ok("assign", "set", "project", "p1", "proj-env", "--company", "acme")
	c.ok("assign", "set", "agent", "ag1", "agent-env", "--company", "acme")
	c.ok("assign", "set", "default", "default-env")
	c.ok("assign", "set", "project", "p-host", "host", "--company", "acme")

	// ASG-1: the strongest binding the scope has wins.
	for _, tc := range []struct {
		name  string
		flags []string
		kind  environment.BindingKind
		env   string
	}{
		{"workspace beats project and agent", []string{"--workspace", "ws1", "--project", "p1", "--agent", "ag1"}, environment.BindingWorkspace, "ws-env"},
		{"project beats agent", []string{"--workspace", "ws-unbound", "--project", "p1", "--agent", "ag1"}, environment.BindingProject, "proj-env"},
		{"agent beats the default", []string{"--project", "p-unbound", "--agent", "ag1"}, environment.BindingAgent, "agent-env"},
		{"the instance default applies to every company", []string{"--company", "other"}, environment.BindingInstanceDefault, "default-env"},
	} {
		args := append([]string{"assign", "resolve", "--company", "acme"}, tc.flags...)
		var got resolved
		c.okJSON(&got, args...)
		if got.Binding.Kind != tc.kind || got.Environment.Name != tc.env || got.Environment.ID != ids[tc.env] {
			t.Errorf("%s: won %s -> %s (%s); want %s -> %s", tc.name, got.Binding.BindingRef, got.Environment.Name, got.Environment.ID, tc.kind, tc.env)
		}
	}
	wantContains(t, "readable resolve", c.ok("assign", "resolve", "--company", "acme", "--workspace", "ws1"),
		`the workspace ws1 binding of company "acme" won -> environment "ws-env"`)

	var all []environment.Binding
	c.okJSON(&all, "assign", "show")
	var refs []string
	for _, b := range all {
		refs = append(refs, b.BindingRef.String())
	}
	if diff := cmp.Diff([]string{"agent ag1", "instance default", "project p-host", "project p1", "workspace ws1"}, refs); diff != "" {
		t.Errorf("assign show (-want +got):\n%s", diff)
	}
	wantContains(t, "show --env", c.ok("assign", "show", "--env", "proj-env"), "p1", "proj-env")

	// acme's workspace binding does not apply to globex's ws1 (keys are
	// per company, ASG-3): globex resolves through the instance default.
	var other resolved
	c.okJSON(&other, "assign", "resolve", "--company", "globex", "--workspace", "ws1")
	if other.Binding.Kind != environment.BindingInstanceDefault || other.Environment.Name != "default-env" {
		t.Errorf("globex's ws1: the %s won (%s), want the instance default", other.Binding.BindingRef, other.Environment.Name)
	}

	// Refusals name the winning binding and do not fall back (ASG-2, 3).
	c.ok("env", "archive", "ws-env")
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"archived target", []string{"--company", "acme", "--workspace", "ws1", "--project", "p1"},
			[]string{`workspace ws1 binding of company "acme"`, `"ws-env"`, "archived", "not falling back"}},
		{"under-capable target", []string{"--company", "acme", "--project", "p-host", "--require", "exec,terminal"},
			[]string{`project p-host binding of company "acme"`, `"host"`, "terminal"}},
	} {
		out, msg := c.fail(append([]string{"--json", "assign", "resolve"}, tc.flags...)...)
		if slices.Contains(tc.flags, "globex") && (strings.Contains(msg, "acme") || strings.Contains(msg, "ws-env")) {
			t.Errorf("%s: refusal %q names another tenant's company or environment (ASG-3)", tc.name, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", tc.name, msg, w)
			}
		}
		var r refusal
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Refused.Kind == "" {
			t.Errorf("%s: JSON refusal: %v\n%s", tc.name, err, out)
		}
	}

	// Binding keys are per company: globex binds its own ws1, and clearing
	// acme's workspace binding (named by --company) leaves globex's and
	// lets acme's project binding win.
	c.ok("assign", "set", "workspace", "ws1", "proj-env", "--company", "globex")
	wantContains(t, "clear", c.ok("assign", "clear", "workspace", "ws1", "--company", "acme"), "workspace ws1", `company "acme"`)
	var gx resolved
	c.okJSON(&gx, "assign", "resolve", "--company", "globex", "--workspace", "ws1")
	if gx.Binding.Kind != environment.BindingWorkspace || gx.Binding.Company != "globex" || gx.Environment.Name != "proj-env" {
		t.Errorf("globex's ws1 after acme's was cleared: %+v", gx)
	}
	var got resolved
	c.okJSON(&got, "assign", "resolve", "--company", "acme", "--workspace", "ws1", "--project", "p1")
	if got.Binding.Kind != environment.BindingProject {
		t.Errorf("after clearing ws1: %s won, want the project binding", got.Binding.BindingRef)
	}
	c.ok("assign", "clear", "default")
	_, msg := c.fail("assign", "resolve", "--company", "acme")
	wantContains(t, "no binding", msg, "no environment bound")

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"company required", []string{"assign", "set", "workspace", "ws2", "proj-env"}, []string{"workspace ws2", "--company"}},
		{"unknown kind", []string{"assign", "set", "team", "t1", "proj-env", "--company", "acme"}, []string{`"team"`}},
		{"default takes no key", []string{"assign", "set", "default", "x", "proj-env"}, []string{"no key"}},
		{"unknown environment", []string{"assign", "set", "project", "p2", "nope", "--company", "acme"}, []string{"project p2", `"nope"`}},
		{"agents may not bind", []string{"--as", "agent:a1", "assign", "set", "project", "p2", "proj-env", "--company", "acme"}, []string{"agent", "may not bind"}},
		{"clear a missing binding", []string{"assign", "clear", "project", "p-none", "--company", "acme"}, []string{"project p-none", "not found"}},
		{"clear names the company", []string{"assign", "clear", "project", "p1"}, []string{"project p1", "--company"}},
	} {
		_, msg := c.fail(tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", tc.name, msg, w)
			}
		}
	}
}
