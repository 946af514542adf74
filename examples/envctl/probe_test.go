package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/internal/fakectl"
)

// TestProbeCommands: probing a fake environment with a pinned image shows
// each stage as it completes, the platform, the confirmed cleanup and the
// recorded qualification, which `qualification show` then reports for that
// company only (PRB-3, PRB-5, QUAL-4, QUAL-7). A local probe says what it
// did not validate (PRB-1); a draft saves no environment (PRB-4); a board member
// may not probe (PRB-7).
func TestProbeCommands(t *testing.T) {
	c := newCLI(t)
	const canary = "CANARY-probe-77aa"
	c.createFake("pinned", `{"image":"`+c.fake.DefaultImageIdentity().String()+`","api_key":"`+canary+`"}`)

	out, progress, err := c.exec("", "probe", "pinned", "--company", "acme")
	if err != nil {
		t.Fatalf("probe pinned: %v\n%s%s", err, out, progress)
	}
	// Progress: one line per completed stage, in order, on stderr.
	var stages []string
	for _, line := range strings.Split(strings.TrimSpace(progress), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "ok" {
			stages = append(stages, f[0])
		}
	}
	if got := strings.Join(stages, " "); got != "resolve acquire detect isolation image release qualify" {
		t.Errorf("progress stages = %q\n%s", got, progress)
	}
	wantContains(t, "probe output", out, "probe OK", "platform: linux/amd64", "libc=glibc", "image: "+c.fake.DefaultImageIdentity().String(),
		"cleanup: confirmed=true", "platform qualification recorded: true", "isolation: container (")

	var res probejson.Result
	c.okJSON(&res, "probe", "pinned", "--company", "acme")
	if !res.OK || !res.PlatformQualificationRecorded || res.Platform.OS != "linux" || res.Platform.Arch != "amd64" ||
		res.Cleanup == nil || !res.Cleanup.Confirmed || len(res.Stages) != 7 || res.Isolation != "container" {
		t.Errorf("probe --json: %+v", res)
	}
	for _, sb := range fakectl.Of(c.fake).Sandboxes() {
		if sb.State != drivers.StateDestroyed {
			t.Errorf("probe left sandbox %s %s", sb.ID, sb.State)
		}
	}

	var q qualificationOut
	c.okJSON(&q, "qualification", "show", "pinned", "--company", "acme")
	if !q.Qualified || q.Platform == nil || q.Platform.Arch != "amd64" {
		t.Errorf("qualification show for acme: %+v", q)
	}
	wantContains(t, "qualification show", c.ok("qualification", "show", "pinned", "--company", "acme"), "is qualified", "linux/amd64")
	var foreign qualificationOut
	c.okJSON(&foreign, "qualification", "show", "pinned", "--company", "globex")
	if foreign.Qualified || foreign.Platform != nil || foreign.Code == "" {
		t.Errorf("acme's record qualifies globex: %+v", foreign)
	}

	// A mutable tag probes fine and does not qualify, saying why (QUAL-5).
	c.createFake("tagged", `{"image":"`+"registry.fake.test/berth/base:latest"+`"}`)
	res = probejson.Result{}
	c.okJSON(&res, "probe", "tagged", "--company", "acme")
	if !res.OK || res.PlatformQualificationRecorded || res.QualificationDiagnostic == nil {
		t.Errorf("probe of a mutable tag: ok=%t recorded=%t diag=%v", res.OK, res.PlatformQualificationRecorded, res.QualificationDiagnostic)
	}
	// The text says how to fix it: envctl image pin.
	wantContains(t, "probe of a mutable tag", c.ok("probe", "tagged", "--company", "acme"), "qualification: ", "to qualify it: pin the image (envctl image pin REF")

	// PRB-1: a local probe reports the host and says what it did not check.
	dir := t.TempDir()
	c.ok("env", "create", "--name", "here", "--driver", "local", "--config", writeFile(t, `{"workdir":"`+dir+`"}`))
	out = c.ok("probe", "here", "--company", "acme")
	wantContains(t, "local probe", out, "Local probe", dir, "platform: linux", "This probe did NOT validate an adapter, a workspace or task execution.", "platform qualification recorded: false")

	// PRB-4: a draft probe saves no environment and never qualifies.
	before := c.ok("--json", "env", "list")
	cfg := writeFile(t, `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	res = probejson.Result{}
	c.okJSON(&res, "probe", "--draft", "--driver", "fake", "--config", cfg)
	if !res.OK || !res.Draft || res.PlatformQualificationRecorded || res.QualificationDiagnostic == nil ||
		res.QualificationDiagnostic.Code != "not_saved" {
		t.Errorf("draft probe: %+v", res)
	}
	if after := c.ok("--json", "env", "list"); after != before {
		t.Errorf("a draft probe changed the catalog:\n%s\n%s", before, after)
	}

	// A failed probe prints its result and exits non-zero with the code.
	fakectl.Of(c.fake).Inject(fakectl.Fault{Op: "create", Err: drivers.ErrAuth})
	res = probejson.Result{}
	out, _, err = c.exec("", "--json", "probe", "pinned", "--company", "acme")
	fakectl.Of(c.fake).ClearFaults()
	if err == nil {
		t.Fatalf("a probe whose create fails succeeded:\n%s", out)
	}
	if json.Unmarshal([]byte(out), &res) != nil || res.OK || res.Code != "auth_failed" {
		t.Errorf("failing probe: err=%v\n%s", err, out)
	}
	wantContains(t, "failed probe error", err.Error(), "failed", string(res.Code))

	// PRB-7: board members and agents may not probe.
	for _, as := range []string{"board_member:bea", "agent:a1"} {
		_, msg := c.fail("--as", as, "probe", "pinned", "--company", "acme")
		wantContains(t, as+" probe", msg, "may not probe")
	}
	_, msg := c.fail("probe", "pinned")
	wantContains(t, "probe without company", msg, "pinned", "--company")

	if strings.Contains(c.all.String(), canary) {
		t.Errorf("the api key was printed")
	}
}
