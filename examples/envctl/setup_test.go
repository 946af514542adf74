package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/templates"
)

// Issue 30: envctl image setup --script (progress on stderr, captured and
// promoted with --promote, the same script answered with the template),
// image session show, an interactive session cancelled by another run,
// and refusals, on the fake driver.
func TestImageSetup(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.fake = fake.New(nil) // it answers the setup's scripts as a clean sandbox would
	c.drivers[len(c.drivers)-1] = c.fake
	img := c.fake.AddImage("registry.fake.test/team/app:v1").String()
	envID := c.createFake("setup", `{"image": "`+img+`"}`)
	script := filepath.Join(t.TempDir(), "setup.json")
	if err := os.WriteFile(script, []byte(`{"steps": [{"write": {"path": "/etc/motd", "content": "hi"}}, {"run": ["echo", "built"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := c.exec("", "image", "setup", "setup", "--script", script, "--promote", "--name", "motd", "--json")
	if err != nil {
		t.Fatalf("image setup: %v\n%s", err, errOut)
	}
	wantContains(t, "setup progress on stderr", errOut, "setup: [1] session started", "step 1/2: write /etc/motd", "step 2/2: run", "captured template")
	var ses templates.Session
	if err := json.Unmarshal([]byte(out), &ses); err != nil {
		t.Fatalf("image setup --json: %v: %s", err, out)
	}
	if ses.State != templates.SessionPromoted || ses.Environment != envID || ses.Template == "" || ses.LeaseCleanup != "confirmed" {
		t.Fatalf("image setup --json: %+v", ses)
	}
	wantContains(t, "session show", c.ok("image", "session", "show", ses.ID), "setup session "+ses.ID, ": promoted", "template: "+ses.Template, "[3]")
	wantContains(t, "the same script again", c.ok("image", "setup", "setup", "--script", script), "reused: same content hash, nothing built")

	// Interactive with a stdin that ends at once: the terminal closes,
	// the capture question reads no "y", and the session is cancelled.
	var open templates.Session
	c.okJSON(&open, "image", "setup", "setup", "--script", script, "--interactive", "--json", "--name", "never")
	if open.State != templates.SessionCancelled || open.LeaseCleanup != "confirmed" {
		t.Errorf("interactive setup answered no: %+v", open)
	}
	var shown templates.Session
	c.okJSON(&shown, "image", "session", "show", open.ID)
	if shown.ID != open.ID || shown.State != templates.SessionCancelled {
		t.Errorf("session show --json: %+v", shown)
	}
	_, msg := c.fail("image", "session", "cancel", open.ID)
	wantContains(t, "cancel of an ended session", msg, "it is cancelled")
	_, msg = c.fail("image", "setup", "setup")
	wantContains(t, "setup without a script", msg, "--script FILE, --interactive or both")
	_, msg = c.fail("image", "setup", "setup", "--script", filepath.Join(t.TempDir(), "missing.json"))
	wantContains(t, "missing script", msg, "missing.json")
	_, msg = c.fail("--as", "board_member:b", "image", "setup", "setup", "--script", script)
	wantContains(t, "a board member's setup", msg, "board_member")
}
