package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/lease"
)

// TestAuthCheckCommands drives auth-check record/show/clear (AUTH-2): a
// record names the environment's fingerprint and provider and the sorted
// projects; a new record replaces the old one; clear removes it; agents
// are refused; the account's value is never printed.
func TestAuthCheckCommands(t *testing.T) {
	c := newCLI(t)
	const canary = "canary-managed-account-5e1f"
	a := c.createFake("a", `{}`)
	b := c.createFake("b", `{}`)
	acct := writeFile(t, canary)

	var rec handover.AuthCheck
	c.okJSON(&rec, "auth-check", "record", "a", "--company", "acme", "--account-file", acct,
		"--project", "p2", "--project", "p1", "--status", "succeeded")
	if rec.Status != handover.StatusSucceeded || rec.Version != 1 || rec.Environment != a ||
		rec.Provider != (handover.Provider{Driver: "fake", Account: a}) || strings.Join(rec.Projects, ",") != "p1,p2" ||
		!strings.HasPrefix(rec.Fingerprint, "sha256:") || rec.CheckedBy != "envctl" {
		t.Errorf("record = %+v", rec)
	}
	ref := rec.AccountRef
	if _, err := handover.ParseAccountRef(ref); err != nil {
		t.Fatalf("record's account reference: %v", err)
	}
	wantContains(t, "show", c.ok("auth-check", "show", "--company", "acme"), ref, `company "acme": succeeded (version 1)`, "projects [p1,p2]")

	// A new preparation (another environment) replaces the record.
	wantContains(t, "record failed", c.ok("auth-check", "record", "b", "--company", "acme", "--account", ref,
		"--project", "p1", "--status", "failed", "--message", "p1 has no access"), "failed", b, "p1 has no access")
	var recs []handover.AuthCheck
	c.okJSON(&recs, "auth-check", "show", "--company", "acme", "--account", ref)
	if len(recs) != 1 || recs[0].Environment != b || recs[0].Status != handover.StatusFailed {
		t.Errorf("after the second record: %+v", recs)
	}

	// Operators only.
	if _, msg := c.fail("--as", "agent:a1@acme", "auth-check", "show", "--company", "acme"); !strings.Contains(msg, "may not auth_check") {
		t.Errorf("an agent's show: %s", msg)
	}
	c.ok("auth-check", "clear", "--company", "acme", "--account", ref)
	wantContains(t, "show after clear", c.ok("auth-check", "show"), "no project auth checks")
	if _, msg := c.fail("auth-check", "clear", "--company", "acme", "--account", ref); !strings.Contains(msg, "not found") {
		t.Errorf("a second clear: %s", msg)
	}
	if _, msg := c.fail("auth-check", "record", "a", "--company", "acme", "--account", "acct-1", "--status", "succeeded"); !strings.Contains(msg, "account_ref") {
		t.Errorf("a malformed reference: %s", msg)
	}
	if strings.Contains(c.all.String(), canary) {
		t.Errorf("envctl printed the managed account:\n%s", c.all.String())
	}
}

// What `envctl run --managed-account REF` puts into its task.
func TestManagedAccountSecret(t *testing.T) {
	u, err := managedAccountSecret("secret:sec_1@v2", ".agent/account.json", []string{"p1"})
	if err != nil || u.Source != lease.SecretFromManagedAccount || u.File != ".agent/account.json" {
		t.Errorf("managedAccountSecret = %+v, %v", u, err)
	}
	if _, err := managedAccountSecret("sec_1", "f", nil); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("a malformed reference = %v, want ErrInvalid", err)
	}
	if _, err := managedAccountSecret("secret:sec_1@v2", "a/../x", nil); err == nil {
		t.Error("an unclean path was accepted")
	}
}
