package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/templates"
)

// Issue 27: envctl image templates, capture, promote, rollback, revoke
// [--delete], history and sweep on the fake driver, across envctl runs
// (the capture resumes the lease another run acquired); env show prints
// the active template and its drift.
func TestImageTemplates(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	img := c.fake.AddImage("registry.fake.test/team/app:v1").String()
	envID := c.createFake("tpl", `{"image": "`+img+`"}`)
	var l lease.Lease
	c.okJSON(&l, "lease", "acquire", "tpl", "--company", "acme")
	var tpl templateOut
	c.okJSON(&tpl, "image", "capture", l.ID, "--name", "with tools")
	if tpl.State != templates.StateCaptured || tpl.Environment != envID || !strings.HasPrefix(tpl.Identity, "snapshot:fake/") || tpl.SourceFingerprint == "" || tpl.CreatedAt.IsZero() {
		t.Fatalf("image capture --json: %+v", tpl)
	}
	_, msg := c.fail("image", "capture", l.ID)
	wantContains(t, "capture without a name", msg, "--name")

	var shown map[string]json.RawMessage
	c.okJSON(&shown, "env", "show", "tpl")
	if _, ok := shown["activeTemplate"]; ok {
		t.Errorf("env show --json before a promote has activeTemplate: %s", shown["activeTemplate"])
	}
	c.okJSON(&tpl, "image", "promote", tpl.ID)
	if tpl.State != templates.StateActive {
		t.Errorf("promote: %+v", tpl)
	}
	var v struct {
		ActiveTemplate *environment.ActiveTemplate `json:"activeTemplate"`
	}
	c.okJSON(&v, "env", "show", "tpl")
	if v.ActiveTemplate == nil || v.ActiveTemplate.ID != tpl.ID || v.ActiveTemplate.Identity != tpl.Identity || v.ActiveTemplate.Drift != environment.DriftRelinked {
		t.Errorf("env show --json activeTemplate %+v, want %s relinked", v.ActiveTemplate, tpl.ID)
	}
	c.okJSON(&shown, "env", "show", "tpl")
	var keys map[string]any
	if err := json.Unmarshal(shown["activeTemplate"], &keys); err != nil || len(keys) != 3 {
		t.Errorf("activeTemplate JSON %s, want {id, identity, drift}", shown["activeTemplate"])
	}
	wantContains(t, "env show", c.ok("env", "show", "tpl"), "active template: "+tpl.ID, "drift relinked")

	var l2 lease.Lease
	c.okJSON(&l2, "lease", "acquire", "tpl", "--company", "acme")
	var second templateOut
	c.okJSON(&second, "image", "capture", l2.ID, "--name", "second")
	c.ok("image", "promote", second.ID)
	c.okJSON(&tpl, "image", "rollback", tpl.ID)
	if tpl.State != templates.StateActive {
		t.Errorf("rollback: %+v", tpl)
	}
	var list []templateOut
	c.okJSON(&list, "image", "templates", "tpl")
	if len(list) != 2 || list[0].ID != tpl.ID || list[1].ID != second.ID || list[1].State != templates.StateSuperseded {
		t.Errorf("image templates --json: %+v", list)
	}
	var hist []templates.Event
	c.okJSON(&hist, "image", "history", "tpl")
	if len(hist) != 3 || hist[2].Action != "rollback" || hist[2].To != tpl.ID {
		t.Errorf("image history --json: %+v", hist)
	}
	wantContains(t, "image history", c.ok("image", "history", "tpl"), "promote: none -> "+tpl.ID, "rollback: "+second.ID+" -> "+tpl.ID)

	// l2 started from tpl: the deletion waits for it.
	out := c.ok("image", "revoke", tpl.ID, "--delete", "--reason", "old tools")
	wantContains(t, "revoke --delete while in use", out, "revoked", "deletion wanted", l2.ID, "image sweep")
	v.ActiveTemplate = nil
	c.okJSON(&v, "env", "show", "tpl")
	if v.ActiveTemplate != nil {
		t.Errorf("after revoke env show has activeTemplate %+v", v.ActiveTemplate)
	}
	wantContains(t, "sweep while in use", c.ok("image", "sweep"), "0 templates deleted")
	c.ok("lease", "release", l2.ID)
	wantContains(t, "sweep after the release", c.ok("image", "sweep"), "1 templates deleted")
	c.okJSON(&list, "image", "templates", "tpl")
	if list[0].State != templates.StateDeleted || list[0].DeleteReceipt == nil || !list[0].DeleteReceipt.Confirmed {
		t.Errorf("after the sweep: %+v", list[0])
	}
	c.ok("lease", "release", l.ID)
	_, msg = c.fail("--as", "agent:a1@acme", "image", "templates", "tpl")
	if strings.Contains(msg, second.ID) {
		t.Errorf("an agent's refusal names a template: %s", msg)
	}
}
