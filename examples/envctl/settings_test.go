package main

import (
	"strings"
	"testing"

	"github.com/berthdev/berth/instance"
)

// TestSettingsCommands drives settings show/set (CFG-9): the defaults
// before any write; set changes only the flags given and records who; a
// stale --revision is a conflict; with environments disabled a lease
// acquisition is refused naming the setting while env list goes on; an
// agent may show but not set; the settings persist in the database.
func TestSettingsCommands(t *testing.T) {
	c := newCLI(t)
	var s instance.Settings
	c.okJSON(&s, "settings", "show")
	if s != instance.Defaults() {
		t.Errorf("settings before any write = %+v, want the defaults", s)
	}
	wantContains(t, "show", c.ok("settings", "show"), "enableEnvironments: true", "enableManagedSandboxOnly: false", "never written")
	box := c.createFake("box", `{}`)

	c.okJSON(&s, "settings", "set", "--enable-environments=false")
	if s.EnableEnvironments || s.ManagedSandboxOnly || s.Revision != 1 || s.UpdatedBy != "envctl" {
		t.Errorf("after set = %+v", s)
	}
	if _, msg := c.fail("lease", "acquire", box, "--company", "acme"); !strings.Contains(msg, "enableEnvironments") {
		t.Errorf("lease acquire while disabled: %s", msg)
	}
	wantContains(t, "env list while disabled", c.ok("env", "list"), "box")
	if _, msg := c.fail("settings", "set", "--enable-environments", "--revision", "0"); !strings.Contains(msg, "stale revision 0") {
		t.Errorf("set at a stale revision: %s", msg)
	}
	// Agents read, never write.
	wantContains(t, "an agent's show", c.ok("--as", "agent:a1@acme", "settings", "show"), "enableEnvironments: false", "revision: 1")
	if _, msg := c.fail("--as", "agent:a1@acme", "settings", "set", "--enable-environments=true"); !strings.Contains(msg, "may not update") {
		t.Errorf("an agent's set: %s", msg)
	}

	c.okJSON(&s, "settings", "set", "--enable-environments", "--managed-sandbox-only=true", "--revision", "1")
	if !s.EnableEnvironments || !s.ManagedSandboxOnly || s.Revision != 2 {
		t.Errorf("after the second set = %+v", s)
	}
	// Managed sandboxes only means a container at least (issue 56): the
	// fake declares no isolation, so its lease is refused naming the
	// setting, not as a host driver.
	if _, msg := c.fail("lease", "acquire", box, "--company", "acme"); !strings.Contains(msg, "isolation none") || !strings.Contains(msg, "minimum container") ||
		!strings.Contains(msg, "enableManagedSandboxOnly") || strings.Contains(msg, "host driver") {
		t.Errorf("lease acquire of the fake under managed-sandbox-only: %s", msg)
	}
	for _, line := range strings.Split(c.ok("drivers"), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		switch host := f[1] == "host"; {
		case host && !strings.Contains(line, "no: ") || host && !strings.Contains(line, "managed_sandbox_only"):
			t.Errorf("drivers under managed-sandbox-only shows a host driver available: %s", line)
		case f[0] == "fake" && strings.Contains(line, "managed_sandbox_only"):
			t.Errorf("drivers under managed-sandbox-only refuses the fake: %s", line)
		}
	}
	// The listings mark it: the fake's driver row at its defaults, the
	// box's row with its level and the reason.
	wantContains(t, "drivers under managed-sandbox-only", c.ok("drivers"), "none (isolation none at its defaults is below the minimum container)")
	wantContains(t, "env list under managed-sandbox-only", c.ok("env", "list"), "ISOLATION", "none", "below the minimum container")
	if _, msg := c.fail("settings", "set"); !strings.Contains(msg, "--enable-environments") {
		t.Errorf("set with no flag: %s", msg)
	}
	if _, msg := c.fail("settings", "set", "--managed-sandbox-only=maybe"); msg == "" {
		t.Error("set with a bad BOOL did not fail")
	}
	c.okJSON(&s, "settings", "show")
	if s.Revision != 2 || !s.ManagedSandboxOnly || s.QuotaPerCompany != 8 || s.QuotaPerCompanyEnvironment != 4 {
		t.Errorf("settings read back = %+v", s)
	}
	c.ok("settings", "set", "--managed-sandbox-only=false")
	c.ok("lease", "acquire", box, "--company", "acme")

	// The lease quotas are settings every envctl process enforces (issue
	// 51): acme holds one live lease of box; with one per company the next
	// acquisition is refused naming the setting; 0 lifts the limit.
	wantContains(t, "quota set", c.ok("settings", "set", "--quota-per-company", "1", "--quota-per-company-env", "3"),
		"quotaPerCompany: 1", "quotaPerCompanyEnvironment: 3")
	if _, msg := c.fail("lease", "acquire", box, "--company", "acme"); !strings.Contains(msg, "quotaPerCompany") || !strings.Contains(msg, "has 1 live leases") {
		t.Errorf("lease acquire past the quota: %s", msg)
	}
	c.ok("lease", "acquire", box, "--company", "globex") // another company's own count
	c.ok("settings", "set", "--quota-per-company", "0")
	c.ok("lease", "acquire", box, "--company", "acme")
	if _, msg := c.fail("settings", "set", "--quota-per-company", "-1"); msg == "" {
		t.Error("set with a negative quota did not fail")
	}
	wantContains(t, "help", c.ok("settings", "show"), "quotaPerCompany: 0 (no limit)", "quotaPerCompanyEnvironment: 3")

	// The minimum isolation (issue 56): the fake declares none, so under
	// gvisor its lease is refused naming the target, its level and the
	// minimum; none lifts it.
	wantContains(t, "minimum set", c.ok("settings", "set", "--minimum-isolation", "gvisor"), "minimumIsolation: gvisor")
	if _, msg := c.fail("lease", "acquire", box, "--company", "acme"); !strings.Contains(msg, `"box"`) || !strings.Contains(msg, "isolation none") || !strings.Contains(msg, "minimum gvisor") {
		t.Errorf("lease acquire below the minimum isolation: %s", msg)
	}
	if _, msg := c.fail("settings", "set", "--minimum-isolation", "vm"); msg == "" {
		t.Error("set with a level that is none did not fail")
	}
	c.okJSON(&s, "settings", "set", "--minimum-isolation", "none")
	if s.MinimumIsolation != 0 {
		t.Errorf("after --minimum-isolation none: %+v", s)
	}
	c.ok("lease", "acquire", box, "--company", "acme")
	// An environment's own requirement (--json-body's requireIsolation).
	out, errOut, err := c.exec(`{"name": "strict", "driver": "fake", "requireIsolation": "container"}`, "--json", "env", "create", "--json-body", "-")
	if err != nil {
		t.Fatalf("env create strict: %v\n%s%s", err, out, errOut)
	}
	wantContains(t, "env show strict", c.ok("env", "show", "strict"), "isolation: none (requires container)", "below the minimum container")
	if _, msg := c.fail("lease", "acquire", "strict", "--company", "acme"); !strings.Contains(msg, "requireIsolation") {
		t.Errorf("lease acquire of strict: %s", msg)
	}
}
