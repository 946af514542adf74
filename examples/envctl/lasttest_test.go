package main

import (
	"regexp"
	"testing"
)

// The last Test stays (issue 53 item 2): after envctl probe, another
// envctl process reads it in env show --company, env list --company and
// qualification show: passed, then failing since the first of two
// failures, with the failure's code and sentence.
func TestLastTestShown(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	id := c.createFake("kept", `{}`)
	if out := c.ok("env", "show", id, "--company", "acme"); !regexp.MustCompile(`last test for company "acme": never`).MatchString(out) {
		t.Errorf("env show before any probe:\n%s", out)
	}
	c.ok("probe", id, "--company", "acme")
	out := c.ok("env", "show", id, "--company", "acme")
	wantContains(t, "env show after a passing probe", out, `last test for company "acme": passed `, "Reached ")
	c.ok("env", "archive", id)
	for range 2 {
		_, _, _ = c.exec("", "probe", id, "--company", "acme")
	}
	out = c.ok("env", "show", id, "--company", "acme")
	wantContains(t, "env show after two failed probes", out, `last test for company "acme": failing since `, "(archived)", "archived")
	if out := c.ok("env", "list", "--company", "acme"); !regexp.MustCompile(`(?m)^LAST TEST|LAST TEST`).MatchString(out) ||
		!regexp.MustCompile(`failing since \d{4}-\d\d-\d\d \d\d:\d\d UTC \(archived\)`).MatchString(out) {
		t.Errorf("env list --company after failed probes:\n%s", out)
	}
	if out := c.ok("env", "list"); regexp.MustCompile(`LAST TEST`).MatchString(out) {
		t.Errorf("env list without --company has the column:\n%s", out)
	}
	if out := c.ok("env", "show", id, "--company", "globex"); !regexp.MustCompile(`"globex": never`).MatchString(out) {
		t.Errorf("another company's last test shown:\n%s", out)
	}
	wantContains(t, "qualification show", c.ok("qualification", "show", id, "--company", "acme"), "is not qualified", `last test for company "acme": failing since `)
}
