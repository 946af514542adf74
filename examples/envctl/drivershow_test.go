package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// envctl drivers show DRIVER prints the driver's config fields from its
// schema: basic ones first, the advanced ones under their own heading, each
// with its type, whether it is required or its default, and its help; a
// secret field says where its value goes. It needs no store.
func TestDriversShowPrintsTheSchema(t *testing.T) {
	t.Parallel()
	out, errOut, err := runCLI(t, "", "drivers", "show", "docker")
	if err != nil {
		t.Fatalf("drivers show docker: %v\n%s", err, errOut)
	}
	image := strings.Index(out, "\n  image (string; required)\n")
	adv := strings.Index(out, "\nAdvanced (seldom changed):\n")
	host := strings.Index(out, "\n  host (string; default ")
	secret := strings.Index(out, "\n  registry_auth (string; optional; secret: the value is moved to the secret store")
	if image < 0 || adv < 0 || host < 0 || secret < 0 || !(image < adv && adv < host && adv < secret) {
		t.Errorf("drivers show docker: want image among the basic fields, host and registry_auth under Advanced\n%s", out)
	}
	if !strings.Contains(out, "      image reference; pin it as repo@sha256:...") {
		t.Errorf("drivers show docker: the image field's help is missing\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "      ") && len(line) > 6+72 && strings.Contains(strings.TrimSpace(line), " ") {
			t.Errorf("help line longer than 72 columns: %q", line)
		}
	}

	out, errOut, err = runCLI(t, "", "--json", "drivers", "show", "ssh")
	if err != nil {
		t.Fatalf("--json drivers show ssh: %v\n%s", err, errOut)
	}
	var got struct {
		Driver string `json:"driver"`
		Fields []struct {
			Name     string `json:"name"`
			Kind     string `json:"kind"`
			Required bool   `json:"required"`
		} `json:"fields"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json drivers show ssh: %v\n%s", err, out)
	}
	kinds := map[string]string{}
	for _, f := range got.Fields {
		kinds[f.Name] = f.Kind
	}
	if got.Driver != "ssh" || kinds["host"] != "identity" || kinds["private_key"] != "secret" {
		t.Errorf("--json drivers show ssh = %+v, want the ssh schema with host an identity field and private_key a secret", got)
	}

	_, errOut, err = runCLI(t, "", "drivers", "show", "nosuch")
	if exitCode(err) != 2 || !strings.Contains(errOut, `there is no driver "nosuch"; the drivers are `) || !strings.Contains(errOut, "docker") {
		t.Errorf("drivers show nosuch: exit %d, stderr %q; want 2 and the drivers' names", exitCode(err), errOut)
	}
}
