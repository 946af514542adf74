package main

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/fakectl"
)

// attr returns attribute name of the first element matching css ("" when
// none).
func (b tab) attr(css, name string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string]("((document.querySelector("+quoteJS(css)+")||{getAttribute(){return ''}}).getAttribute("+quoteJS(name)+")||'')"))
	if err != nil {
		b.t.Fatalf("read %s[%s]: %v", css, name, err)
	}
	return s
}

func quoteJS(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// getEnv reads environment id through the API as the administrator.
func (e *tenv) getEnv(t *testing.T, id string) environment.View {
	t.Helper()
	var v environment.View
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + id, token: tokAdmin}).decode(t, &v)
	return v
}

// The states of the Environments page that the main walk does not reach,
// on the fake driver, walked by clicking and typing with DOM assertions:
// a qualification recorded by Test and then invalidated by a later Test
// that finds the snapshot gone (the notice says what changed); the
// environment's env vars and metadata edited (a credential-looking name
// refused on its field, then saved, then a line removed); archive and
// restore from the row (an archived row has no Test and is no run
// target); a long run stopped from the page with its stop proof and lease
// receipt; two tabs saving the instance settings (the second gets the
// conflict and reloads); and, with environments disabled, the short
// reason in the row with the library's whole error on hover.
func TestEnvironmentsPageStatesInABrowser(t *testing.T) {
	fk := fake.New(nil)
	snap := fakectl.Of(fk).AddSnapshot("base")
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{fk}})
	admin, page, _ := imagesPage(t, e)

	var v environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "snap", "driver": "fake", "config": map[string]any{"image": "snapshot:" + snap}}}).decode(t, &v)
	row := `tr[data-env="` + v.ID + `"]`

	// Qualification: recorded by a Test, then invalidated by a Test that
	// finds the snapshot gone; the editor says when and what changed.
	admin.do("open the page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("envs")))
	admin.do("test snap", chromedp.Click(chromedp.CSS(row+" button.test")))
	admin.waitText("#result-"+v.ID, "qualification recorded")
	admin.do("open snap", chromedp.Click(chromedp.CSS(row+" a.edit")), chromedp.WaitVisible(chromedp.ID("editor")))
	admin.waitJS(`document.getElementById("qualification") !== null`)
	if s := admin.text("#qualification"); !strings.HasPrefix(s, "recorded: linux/") {
		t.Errorf("the qualification after the first Test: %q", s)
	}
	fakectl.Of(fk).DeleteSnapshot(snap)
	admin.do("test snap again", chromedp.Click(chromedp.CSS(row+" button.test")))
	if s := admin.waitText("#result-"+v.ID, "Failed"); !strings.Contains(s, "image_not_found") || !strings.Contains(s, "invalidated") {
		t.Errorf("the second Test's result: %q", s)
	}
	admin.do("reload snap", chromedp.Navigate(page+"?edit="+v.ID), chromedp.WaitVisible(chromedp.ID("qualification")))
	q := admin.text("#qualification")
	if admin.attr("#qualification", "data-code") != "invalidated" || !strings.HasPrefix(q, "invalidated ") ||
		!strings.Contains(q, "found image snapshot:") || !strings.Contains(q, snap+" gone: the provider reported it not found") || strings.Contains(q, "invalidated at ") {
		t.Errorf("the invalidated notice: %q (code %q)", q, admin.attr("#qualification", "data-code"))
	}
	if title := admin.attr("#qualification time", "title"); !strings.HasSuffix(title, "UTC") {
		t.Errorf("the invalidation's exact time on hover: %q", title)
	}
	screenshot(t, admin.ctx, "s01-qualification-invalidated")
	storyState(t, admin.ctx, "qualification invalidated (what and when)", "#qualification", "invalidated ",
		"#qualification", snap+" gone: the provider reported it not found")

	// Env vars and metadata: a credential-looking name is refused on its
	// field and nothing is saved; then both are saved; then a line goes.
	admin.do("env with a credential name", chromedp.SetValue(chromedp.ID("f-env"), "GREETING=hello\nDEPLOY_TOKEN=abc"),
		chromedp.SetValue(chromedp.ID("f-metadata"), "team=infra\nticket=OPS-7"), chromedp.Click(chromedp.ID("save")))
	if s := admin.waitText("#err-env", "looks like a credential"); !strings.Contains(s, "(invalid)") {
		t.Errorf("the env error on its field: %q", s)
	}
	if got := e.getEnv(t, v.ID); got.Revision != v.Revision || len(got.Env) != 0 {
		t.Errorf("a refused save changed the environment: revision %d, env %v", got.Revision, got.Env)
	}
	screenshot(t, admin.ctx, "s02-env-refused")
	admin.do("env and metadata", chromedp.SetValue(chromedp.ID("f-env"), "GREETING=hello\nLANG=C.UTF-8"), chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`location.search.includes("saved=")`)
	admin.waitJS(`document.getElementById("f-env") && document.getElementById("f-env").value.includes("LANG=C.UTF-8")`)
	if s, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.getElementById("f-metadata").value`)); s != "team=infra\nticket=OPS-7" {
		t.Errorf("the saved metadata reads %q", s)
	}
	got := e.getEnv(t, v.ID)
	if got.Env["GREETING"] != "hello" || got.Env["LANG"] != "C.UTF-8" || got.Metadata["team"] != "infra" || got.Metadata["ticket"] != "OPS-7" {
		t.Errorf("the saved env %v, metadata %v", got.Env, got.Metadata)
	}
	screenshot(t, admin.ctx, "s03-env-saved")
	admin.do("drop a line of each", chromedp.SetValue(chromedp.ID("f-env"), "LANG=C.UTF-8"), chromedp.SetValue(chromedp.ID("f-metadata"), "team=infra"),
		chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`location.search.includes("saved=` + itoa(uint64(got.Revision+1)) + `")`)
	if got := e.getEnv(t, v.ID); len(got.Env) != 1 || got.Env["LANG"] != "C.UTF-8" || len(got.Metadata) != 1 || got.Metadata["team"] != "infra" {
		t.Errorf("after removing a line: env %v, metadata %v", got.Env, got.Metadata)
	}

	// Archive from the row: archived, no Test, not a run target; Restore
	// brings it back.
	// Archive asks first, saying what it does; Cancel sends nothing.
	admin.do("archive snap", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("envs")), chromedp.Click(chromedp.CSS(row+" button.archive")))
	admin.waitText(row+" .confirm-text", "Archive snap? It is kept for history, but it cannot be assigned or leased until it is restored")
	if got, err := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.activeElement.className`)); err != nil || got != "confirm-no" {
		t.Errorf("focus after Archive is on %q (%v), want the confirmation's Cancel", got, err)
	}
	screenshot(t, admin.ctx, "s04-archive-confirm")
	admin.do("cancel the archive", chromedp.Click(chromedp.CSS(row+" .confirm-no")))
	if admin.count(row+" .confirm") != 0 {
		t.Error("Cancel left the confirmation in the row")
	}
	if got := e.getEnv(t, v.ID); got.Status == environment.StatusArchived {
		t.Error("a cancelled Archive archived the environment")
	}
	admin.do("archive snap for real", chromedp.Click(chromedp.CSS(row+" button.archive")), chromedp.Click(chromedp.CSS(row+" .confirm-yes")))
	admin.waitJS(`(document.querySelector('` + row + ` .state')||{}).textContent === "archived"`)
	if admin.count(row+" button.test") != 0 || admin.count(row+" button.restore") != 1 || admin.count(row+" button.archive") != 0 {
		t.Errorf("the archived row: %d Test, %d Restore, %d Archive buttons", admin.count(row+" button.test"), admin.count(row+" button.restore"), admin.count(row+" button.archive"))
	}
	if admin.count(`#run-target option[value="`+v.ID+`"][disabled]`) != 1 {
		t.Error("the run form offers the archived environment")
	}
	if got := e.getEnv(t, v.ID); got.Status != environment.StatusArchived {
		t.Errorf("after Archive the status is %q", got.Status)
	}
	screenshot(t, admin.ctx, "s04-archived")
	admin.do("open the archived one", chromedp.Navigate(page+"?edit="+v.ID), chromedp.WaitVisible(chromedp.ID("editor-archived")))
	admin.do("restore snap", chromedp.Click(chromedp.CSS(row+" button.restore")))
	admin.waitJS(`document.querySelector('` + row + ` button.archive') !== null && document.querySelector('` + row + ` button.test') !== null`)
	if got := e.getEnv(t, v.ID); got.Status == environment.StatusArchived {
		t.Error("Restore left it archived")
	}

	// A long run, stopped from the page: the stop proof and the receipt
	// (on another environment: snap's snapshot is gone).
	box := e.createFake(t, "box")
	admin.do("run a long command", chromedp.Navigate(page+"?company=acme#runs"), chromedp.WaitVisible(chromedp.ID("run-form")),
		chromedp.SetValue(chromedp.ID("run-target"), box.ID), chromedp.SendKeys(chromedp.ID("run-cmd"), "echo started; sleep 600"),
		chromedp.Click(chromedp.ID("run-start")))
	admin.waitText("#run-status", "running")
	admin.waitText("#run-output", "started")
	admin.waitJS(`!document.getElementById("run-stop").disabled`)
	screenshot(t, admin.ctx, "s05-run-running")
	admin.do("stop it", chromedp.Click(chromedp.ID("run-stop")))
	admin.waitText("#run-status", "stopped")
	if s := admin.waitText("#run-proof", "evidence"); !strings.Contains(s, "complete, evidence runner_attested") {
		t.Errorf("the stop proof: %q", s)
	}
	if s := admin.waitText("#run-receipt", "lease "); !strings.Contains(s, "cleanup confirmed") || !strings.Contains(s, "environment "+box.ID) {
		t.Errorf("the receipt after Stop: %q", s)
	}
	if s := admin.text("#run-exit"); !strings.HasPrefix(s, "killed by signal ") {
		t.Errorf("the exit of the stopped run reads %q", s)
	}
	if !admin.waitJS2(`document.getElementById("run-stop").disabled`) {
		t.Error("Stop is still enabled after the run stopped")
	}
	screenshot(t, admin.ctx, "s06-run-stopped")

	// Two tabs save the instance settings: the second is the conflict and
	// says to reload; the reload shows the first tab's save.
	other := newTab(t, admin.ctx)
	admin.do("settings in the first tab", chromedp.Navigate(page+"#settings"), chromedp.WaitVisible(chromedp.ID("settings-form")))
	other.do("settings in the second tab", chromedp.Navigate(page+"#settings"), chromedp.WaitVisible(chromedp.ID("settings-form")))
	admin.do("first tab: managed sandboxes only", chromedp.Click(chromedp.ID("set-managed")), chromedp.Click(chromedp.ID("settings-save")))
	admin.waitJS(`document.getElementById("settings-managed-only") !== null`)
	other.do("second tab: disable", chromedp.Click(chromedp.ID("set-enable")), chromedp.Click(chromedp.ID("settings-save")))
	other.waitText("#settings-status", "changed by someone else")
	screenshot(t, other.ctx, "s07-settings-conflict")
	other.do("reload as told", chromedp.Click(chromedp.ID("settings-reload")))
	other.waitJS(`document.readyState === "complete" && document.getElementById("settings-managed-only") !== null && document.getElementById("settings-form") !== null`)
	if s := other.text("#settings-summary"); s != "environments enabled; managed sandboxes only: yes; lease quotas: 8 per company, 4 per company on one environment" {
		t.Errorf("after the reload the settings read %q", s)
	}
	// The page's script opens the section the address names once it runs:
	// wait for it rather than read the state the parser left.
	if !other.waitJS2(`!document.getElementById("settings").hidden && document.getElementById("set-managed").checked && document.getElementById("set-enable").checked`) {
		t.Error("the reloaded settings are not open with the saved flags")
	}

	// Environments disabled: one short sentence in the row, the whole
	// error on hover; nothing is offered for a new environment.
	other.do("disable environments", chromedp.Click(chromedp.ID("set-enable")), chromedp.Click(chromedp.ID("settings-save")))
	other.waitJS(`document.getElementById("settings-disabled") !== null`)
	if s := other.text(row + " .reason"); s != "Environments are disabled on this instance." {
		t.Errorf("the row's reason: %q", s)
	}
	if title := other.attr(row+" .reason", "title"); !strings.Contains(title, "enableEnvironments is off") || !strings.Contains(title, "environments are disabled") {
		t.Errorf("the full reason on hover: %q", title)
	}
	if other.count("#nothing-offered") != 1 || other.count("#new-driver") != 0 {
		t.Error("the create form is offered with no driver available")
	}
	if s := other.text(`#unavailable-drivers li[data-driver="fake"]`); s != "fake: Environments are disabled on this instance." {
		t.Errorf("the unavailable driver reads %q", s)
	}
	screenshot(t, other.ctx, "s08-disabled-short-reason")
	storyState(t, other.ctx, "unavailable provider (settings-driven)", row+" .reason", "Environments are disabled on this instance.",
		`#unavailable-drivers li[data-driver="fake"]`, "fake: Environments are disabled on this instance.")
}

// waitJS2 is waitJS that reports instead of failing (for an assertion).
func (b tab) waitJS2(expr string) bool {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool]("!!("+expr+")")); err == nil && ok {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// A Daytona environment on the in-process Daytona fake, from the page:
// created with its API key and two secret env vars pasted (write-only:
// keys with versions, no value in the page source or any response); Test
// reaches a sandbox; Check provider measures the API reachable; removing
// ONE key of the secret env map (Remove, then Save) keeps the other key's
// reference as it was and drops the removed one from the stored config.
func TestDaytonaOnThePageInABrowser(t *testing.T) {
	kb := make([]byte, 8)
	rand.Read(kb)
	apiKey := "dtn-" + hex.EncodeToString(kb)
	srv, err := daytonafake.New(&daytonafake.Options{APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	snap, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	drv := daytona.New(&daytona.Options{Logger: slog.New(slog.DiscardHandler),
		PollInterval: 5 * time.Millisecond, PollMax: 50 * time.Millisecond, RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		CleanupTimeout: 10 * time.Second})
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{drv}})
	tee := &teeHandler{next: e.s.Handler()}
	admin, page, _ := pageOn(t, e, tee)
	alpha, beta := "alpha-"+hex.EncodeToString(kb[:4])+"-value", "beta-"+hex.EncodeToString(kb[4:])+"-value"

	admin.do("open the daytona form", chromedp.Navigate(page+"?new=daytona"), chromedp.WaitVisible(chromedp.ID("editor")),
		chromedp.SendKeys(chromedp.ID("f-name"), "cloud"),
		chromedp.SendKeys(chromedp.ID("cfg-api_url"), srv.URL()),
		chromedp.SetValue(chromedp.ID("cfg-api_key"), apiKey),
		chromedp.SetValue(chromedp.ID("cfg-env"), "ALPHA="+alpha+"\nBETA="+beta))
	// The snapshot is picked from the provider's list by name, with the
	// key as pasted (nothing saved yet), not pasted as a UUID.
	other, err := srv.CreateSnapshot("other-tools:2.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	admin.do("list the snapshots", chromedp.Click(chromedp.CSS(`button.pick-image[data-for="snapshot_id"]`)))
	admin.waitText("#pick-status-snapshot_id", "2 images, the most recently used first.")
	if s := admin.text("#pick-snapshot_id"); !strings.Contains(s, "berth-base:1.0 — active, from debian:12.7") || !strings.Contains(s, "other-tools:2.0") {
		t.Errorf("the snapshot picker lists %q", s)
	}
	screenshot(t, admin.ctx, "d00-daytona-snapshot-picker")
	admin.do("pick berth-base", chromedp.SetValue(chromedp.ID("pick-snapshot_id"), snap.ID), chromedp.Click(chromedp.CSS(`button.use-image[data-for="snapshot_id"]`)))
	if v, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.getElementById("cfg-snapshot_id").value`)); v != snap.ID {
		t.Errorf("after the pick the snapshot field holds %q, want %s", v, snap.ID)
	}
	admin.waitText("#pick-status-snapshot_id", "Chose berth-base:1.0 ("+snap.ID+"). Save to keep it.")
	admin.do("save", chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`location.search.includes("saved=1") && document.getElementById("keys-env") !== null`)
	id, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.getElementById("editor").dataset.env`))
	if s := admin.text("#keys-env"); !strings.Contains(s, "ALPHA: set (version 1)") || !strings.Contains(s, "BETA: set (version 1)") {
		t.Errorf("the secret env keys read %q", s)
	}
	if s := admin.text("#state-api_key"); s != "set (version 1)" {
		t.Errorf("the api key reads %q", s)
	}
	for _, secret := range []string{apiKey, alpha, beta} {
		if strings.Contains(admin.source(), secret) {
			t.Errorf("the page source holds the secret %.8s…", secret)
		}
	}
	screenshot(t, admin.ctx, "d01-daytona-saved")
	// On the saved environment the picker asks with the stored key.
	admin.do("list the snapshots again", chromedp.Click(chromedp.CSS(`button.pick-image[data-for="snapshot_id"]`)))
	admin.waitText("#pick-status-snapshot_id", "2 images")
	if s := admin.text("#pick-snapshot_id"); !strings.Contains(s, other.Name) {
		t.Errorf("the saved environment's picker lists %q", s)
	}
	if srv.Calls(daytonafake.RouteListSnapshots) != 2 {
		t.Errorf("the fake served %d snapshot lists, want 2 (one per click)", srv.Calls(daytonafake.RouteListSnapshots))
	}

	// Test: a sandbox on the fake is reached; Check provider: reachable.
	row := `tr[data-env="` + id + `"]`
	admin.do("test cloud", chromedp.Click(chromedp.CSS(row+" button.test")))
	if s := admin.waitText("#result-"+id, "Reached"); !strings.Contains(s, "platform linux/") {
		t.Errorf("the Test result: %q", s)
	}
	if srv.Calls(daytonafake.RouteCreateSandbox) == 0 {
		t.Error("Test created no sandbox on the fake")
	}
	admin.do("check the provider", chromedp.Click(chromedp.CSS(row+" button.health")))
	if s := admin.waitText("#result-"+id, "Provider "); !strings.Contains(s, srv.URL()) || !strings.Contains(s, ": available") {
		t.Errorf("the provider check: %q", s)
	}
	if srv.Calls(daytonafake.RouteHealth) == 0 {
		t.Error("Check provider did not call the fake's health route")
	}
	screenshot(t, admin.ctx, "d02-daytona-test-and-health")

	// Remove BETA only.
	before := e.getEnv(t, id)
	refs := config.Config(before.Config).SecretMapRefs("env")
	admin.do("remove BETA", chromedp.Click(chromedp.CSS(`button.remove-key[data-key="BETA"]`)))
	if s := admin.text(`#keys-env li[data-key="BETA"]`); !strings.Contains(s, "BETA: removed when you save") || !strings.Contains(s, "Keep") {
		t.Errorf("BETA marked for removal reads %q", s)
	}
	screenshot(t, admin.ctx, "d03-daytona-remove-key")
	admin.do("save", chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`location.search.includes("saved=2") && document.getElementById("keys-env") !== null`)
	if s := admin.text("#keys-env"); !strings.Contains(s, "ALPHA: set (version 1)") || strings.Contains(s, "BETA") {
		t.Errorf("after removing BETA the keys read %q", s)
	}
	after := config.Config(e.getEnv(t, id).Config).SecretMapRefs("env")
	if len(after) != 1 || after["ALPHA"] != refs["ALPHA"] {
		t.Errorf("the stored env refs after removing BETA: %v (before %v)", after, refs)
	}
	if s := admin.text("#state-api_key"); s != "set (version 1)" {
		t.Errorf("the api key after the save reads %q", s)
	}
	// The removed key's secret is retired (the Test's lease is proven
	// clean, so nothing keeps it); the kept key's value is untouched.
	sec, err := secretfile.Open(t.Context(), filepath.Join(e.dir, "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := sec.Get(t.Context(), refs["ALPHA"]); err != nil || v != alpha {
		t.Errorf("the kept key's secret: %v", err)
	}
	if _, err := sec.Get(t.Context(), refs["BETA"]); err == nil {
		t.Error("the removed key's secret is still in the secret store")
	}
	screenshot(t, admin.ctx, "d04-daytona-key-removed")

	for _, secret := range []string{apiKey, alpha, beta} {
		if strings.Contains(tee.String(), secret) {
			t.Errorf("a response holds the secret %.8s…", secret)
		}
		if strings.Contains(e.logs.String(), secret) {
			t.Errorf("the log holds the secret %.8s…", secret)
		}
	}
}
