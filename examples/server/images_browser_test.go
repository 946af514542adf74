package main

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// imagesPage logs the administrator in (first-start link) and returns
// the admin's tab and the page URL.
func imagesPage(t *testing.T, e *tenv) (tab, string, *httptest.Server) {
	t.Helper()
	return pageOn(t, e, e.s.Handler())
}

// pageOn is imagesPage with the server's handler h (a teeHandler keeps
// every response).
func pageOn(t *testing.T, e *tenv, h http.Handler) (tab, string, *httptest.Server) {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	link, err := e.s.host.ensureAdmin(t.Context(), time.Now())
	if err != nil || link == "" {
		t.Fatalf("ensureAdmin: %q, %v", link, err)
	}
	root := startBrowser(t, 4*time.Minute)
	admin := tab{t: t, ctx: root}
	admin.do("log in with the link", chromedp.Navigate(ts.URL+"/login?link="+url.QueryEscape(link)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="`+envPagePath+`"]`)))
	return admin, ts.URL + envPagePath, ts
}

// transcript is what the page's terminal received since its last reset.
func (b tab) transcript() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("images-panel").berthTranscript || ""`))
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// reconnectKeepsBytes disconnects and reconnects the page's terminal and
// checks that what it shows is what it showed (nothing lost, nothing
// repeated), then that new output comes once.
func reconnectKeepsBytes(t *testing.T, b tab, typeLine func(string), mark string) {
	t.Helper()
	before := b.transcript()
	b.do("disconnect", chromedp.Click(chromedp.ID("term-disconnect")))
	b.waitText("#term-status", "disconnected")
	screenshot(t, b.ctx, "term-disconnected")
	storyState(t, b.ctx, "terminal disconnect and reconnect", "#term-status", "disconnected")
	b.do("reconnect", chromedp.Click(chromedp.ID("term-connect")))
	b.waitText("#term-status", "connected to")
	if s := b.text("#term-status"); strings.Contains(s, "reset") {
		t.Errorf("the reconnect was a reset: %q", s)
	}
	typeLine("echo " + mark + "-after")
	b.waitJS(`(document.getElementById("images-panel").berthTranscript || "").split("` + mark + `-after").length >= 3`)
	after := b.transcript()
	if !strings.HasPrefix(after, before) {
		t.Errorf("after the reconnect the terminal shows\n%q\nwhich does not continue\n%q", after, before)
	}
	if n := strings.Count(after, mark+"-after"); n != 2 { // the echoed line and its output
		t.Errorf("%q appears %d times after the reconnect, want 2: %q", mark+"-after", n, after)
	}
}

// UI-4 on the fake (test mode) with the plain line terminal (no xterm
// served): an interactive setup, a command typed and its output, a
// disconnect and a reconnect with no byte lost or repeated, capture with
// promote, the drift; the notice of a driver without template capture;
// a board member reading without controls.
func TestImagesPanelPlainTerminalInABrowser(t *testing.T) {
	narrow := fake.New(&fake.Options{Name: "fake-narrow", Undeclared: drivers.NewSet(drivers.CapTemplateCapture, drivers.CapTerminal)})
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{fake.New(nil), narrow}})
	env := e.createFake(t, "imgbox")
	var nv environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "narrowbox", "driver": "fake-narrow"}}).decode(t, &nv)
	admin, page, ts := imagesPage(t, e)

	admin.do("open the narrow environment", chromedp.Navigate(page+"?edit="+nv.ID+"#images"), chromedp.WaitVisible(chromedp.ID("images-panel")))
	if s := admin.text("#no-capture"); !strings.Contains(s, "no template capture") || admin.count("#images button") != 0 {
		t.Errorf("the narrow driver's images panel: %q, %d buttons", s, admin.count("#images button"))
	}
	screenshot(t, admin.ctx, "img-01-no-capture")
	storyState(t, admin.ctx, "interactive-setup and template-capture limits", "#no-capture", "no template capture")

	admin.do("open the environment", chromedp.Navigate(page+"?edit="+env.ID+"#images"), chromedp.WaitVisible(chromedp.ID("setup-form")))
	admin.waitText("#templates", "No templates yet.")
	if admin.count("#term-xterm") != 0 || admin.count("#term-out") != 1 {
		t.Fatal("without xterm the page does not offer the plain line terminal")
	}
	if s := admin.text("#drift"); s != "none" {
		t.Errorf("drift %q before any template", s)
	}
	// A script that is not JSON is refused next to the field.
	admin.do("a broken script", chromedp.SendKeys(chromedp.ID("setup-script"), "{not json"), chromedp.Click(chromedp.ID("setup-scripted")))
	admin.waitText("#setup-error", "script: not JSON")
	admin.waitJS(`(document.getElementById("setup-script").value = "") === ""`) // cleared
	admin.do("an interactive setup", chromedp.SendKeys(chromedp.ID("setup-name"), "by-hand"),
		chromedp.Click(chromedp.ID("setup-interactive")))
	admin.waitText("#session-state", "waiting for you")
	admin.waitText("#session-events", "waiting")
	admin.do("connect", chromedp.WaitVisible(chromedp.ID("terminal-panel")), chromedp.Click(chromedp.ID("term-connect")))
	admin.waitText("#term-status", "connected to")
	typeLine := func(s string) {
		admin.do("type "+s, chromedp.SendKeys(chromedp.ID("term-in"), s+kb.Enter))
	}
	typeLine("echo plain-hello")
	admin.waitText("#term-out", "plain-hello\n")
	screenshot(t, admin.ctx, "img-02-plain-terminal")
	storyState(t, admin.ctx, "terminal connect", "#term-status", "connected to", "#term-out", "plain-hello")
	reconnectKeepsBytes(t, admin, typeLine, "plain")
	admin.do("resize", chromedp.Clear(chromedp.ID("term-rows")), chromedp.SendKeys(chromedp.ID("term-rows"), "30"), chromedp.Click(chromedp.ID("term-resize")))

	admin.do("capture and promote", chromedp.Click(chromedp.ID("capture-promote")), chromedp.Click(chromedp.ID("session-capture")))
	admin.waitText("#session-state", "captured and promoted")
	admin.waitText("#drift", "relinked")
	admin.waitText("#templates .tpl-state", "active")
	admin.waitText("#template-history", "promote none →")
	// Templates go by name, the id small beside it.
	admin.waitText("#active-name", "by-hand")
	if s := admin.text("#templates .tpl-name"); s != "by-hand" {
		t.Errorf("the template's name cell reads %q", s)
	}
	if s := admin.text("#term-status"); !strings.Contains(s, "closes") && !strings.Contains(s, "ended") {
		t.Errorf("after the capture the terminal status is %q", s)
	}
	admin.waitJS(`!document.getElementById("drift-note-relinked").hidden && document.getElementById("drift-note-detached").hidden`)
	screenshot(t, admin.ctx, "img-03-promoted")
	storyState(t, admin.ctx, "capture and promote", "#session-state", "captured and promoted", "#templates .tpl-state", "active")
	first := admin.text("#active-id")

	// A scripted setup pasted as JSON, promoted when captured: it
	// supersedes the first template, which rolls back; then a revoke
	// clears the pointer.
	// The first session's id is read before the click: a scripted setup
	// can be shown, even captured, before a read after the click.
	firstSession := strings.TrimSpace(admin.text("#session-id"))
	admin.do("a scripted setup", chromedp.SendKeys(chromedp.ID("setup-script"), `{"steps": [{"write": {"path": "/etc/motd", "content": "hi\n"}}]}`),
		chromedp.Click(chromedp.ID("setup-promote")), chromedp.Click(chromedp.ID("setup-scripted")))
	admin.waitJS(`document.getElementById("session-id").textContent.trim() !== "` + firstSession + `"`)
	admin.waitText("#session-state", "captured and promoted")
	admin.waitText("#session-events", "step 1/1")
	admin.waitJS(`document.querySelector('#templates tr[data-template="` + first + `"] button.rollback') !== null`)
	// The scripted template is the active one now.
	admin.waitJS(`document.getElementById("active-id").textContent.startsWith("tpl_") && document.getElementById("active-id").textContent !== "` + first + `"`)
	// The lists settle (the pointer's history is written last).
	admin.waitJS(`document.querySelectorAll("#template-history li").length === 2`)
	screenshot(t, admin.ctx, "img-05-scripted")

	storyState(t, admin.ctx, "scripted setup", "#session-state", "captured and promoted")
	storyState(t, admin.ctx, "setup progress", "#session-events", "step 1/1")

	// A change of the environment's target detaches both templates (one
	// source): Roll back could only fail, so it is off and the row says
	// why; the target put back makes it possible again.
	setRegion := func(region string) {
		t.Helper()
		v := e.getEnv(t, env.ID)
		e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/environments/" + env.ID, token: tokAdmin,
			header: map[string]string{"If-Match": `"` + strconv.FormatInt(v.Revision, 10) + `"`},
			body:   map[string]any{"config": map[string]any{"region": region}}})
		admin.do("reload the images", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("images-panel")))
	}
	rollback := `#templates tr[data-template="` + first + `"] button.rollback`
	setRegion("eu-west-9")
	admin.waitText("#drift", "detached")
	admin.waitJS(`document.querySelector('` + rollback + `').disabled`)
	admin.waitText(`#templates tr[data-template="`+first+`"] .why-not`, "Cannot be promoted again: the environment's image, target or account changed since this capture.")
	screenshot(t, admin.ctx, "img-05b-detached-rollback-off")
	setRegion("local-1")
	admin.waitText("#drift", "relinked")
	admin.waitJS(`!document.querySelector('` + rollback + `').disabled && document.querySelector('#templates .why-not') === null`)

	admin.do("roll back", chromedp.Click(chromedp.CSS(`#templates tr[data-template="`+first+`"] button.rollback`)))
	admin.waitText("#templates-status", "rollback: "+first+" is active")
	admin.waitText("#active-id", first)
	admin.waitText("#template-history", "rollback")
	admin.do("revoke", chromedp.Click(chromedp.CSS(`#templates tr[data-template="`+first+`"] button.revoke`)))
	// Revoke asks first, saying what it does.
	admin.waitText(`#templates tr[data-template="`+first+`"] .confirm-text`, "? It can never be promoted again. If it is the active template, new leases use the environment's configured image")
	admin.do("confirm the revoke", chromedp.Click(chromedp.CSS(`#templates tr[data-template="`+first+`"] .confirm-yes`)))
	admin.waitText("#templates-status", "revoke: "+first+" is revoked")
	admin.waitText("#active-name", "none (leases start from the configured image)")
	admin.waitText("#drift", "none")
	screenshot(t, admin.ctx, "img-06-revoked")

	// A failure: a terminal whose session ended is refused, and the page
	// says so.
	admin.do("another interactive setup", chromedp.Click(chromedp.ID("setup-interactive")))
	admin.waitText("#session-state", "waiting for you")
	var sl items[struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}]
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + env.ID + "/setup-sessions", token: tokOperator}).decode(t, &sl)
	last := sl.Items[len(sl.Items)-1].ID
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/setup-sessions/" + last + "/cancel", token: tokOperator})
	admin.do("connect to the cancelled session", chromedp.Click(chromedp.ID("term-connect")))
	admin.waitText("#term-status", "connect failed")
	admin.waitText("#session-state", "cancelled")
	screenshot(t, admin.ctx, "img-07-terminal-failed")
	storyState(t, admin.ctx, "terminal failure (with its reason)", "#term-status", "connect failed: Cannot open a terminal in setup session",
		"#term-status", "its sandbox is cancelled", "#session-state", "cancelled")
	if v, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[bool](`document.getElementById("term-status").checkVisibility()`)); !v {
		t.Error("the terminal's failure is not in view")
	}

	// A board member reads the panel and gets no control.
	board := newTab(t, admin.ctx, chromedp.WithNewBrowserContext())
	board.do("board member logs in", chromedp.Navigate(ts.URL+"/login"), chromedp.SendKeys(chromedp.ID("token"), tokBoard),
		chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(`a[href="`+envPagePath+`"]`)),
		chromedp.Navigate(page+"?edit="+env.ID+"#images"), chromedp.WaitVisible(chromedp.ID("images-panel")))
	board.waitText("#templates .tpl-state", "revoked")
	board.waitText("#template-history", "rollback")
	board.waitText("#session-state", "cancelled")
	if n := board.count("#images button, #images input, #images textarea"); n != 0 {
		t.Errorf("the board member's images panel has %d controls", n)
	}
	screenshot(t, board.ctx, "img-04-board")
	storyState(t, board.ctx, "restricted operator (board member)", "#templates .tpl-state", "revoked", "#session-state", "cancelled")
}

// UI-4 on Docker (the real engine, busybox) with xterm.js from Debian's
// node-xterm: an interactive setup, a command typed in xterm writing a
// file, its output read in the page, disconnect and reconnect with nothing
// lost or repeated, capture and promote, then the image field edited in
// the editor and the drift changing from relinked to detached.
func TestImagesOnDockerInABrowser(t *testing.T) {
	dir := defaultXTermDir()
	if dir == "" {
		testenv.Missing(t, "node-xterm", "apt-get install libjs-xterm node-xterm", nil)
	}
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	mb := make([]byte, 6)
	rand.Read(mb)
	mark := hex.EncodeToString(mb)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/page", mark)
	testenv.RemoveImagesAtCleanup(t, cli, "test.berth/page", mark)
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{docker.New(nil)}, xtermDir: dir})
	var box environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "imgbox", "driver": "docker", "config": map[string]any{"image": img.Ref, "network": "none", "labels": map[string]string{"test.berth/page": mark}}}}).decode(t, &box)
	admin, page, _ := imagesPage(t, e)

	admin.do("open the environment", chromedp.Navigate(page+"?edit="+box.ID+"#images"), chromedp.WaitVisible(chromedp.ID("setup-interactive")))
	admin.waitText("#templates", "No templates yet.")
	admin.do("an interactive setup", chromedp.SendKeys(chromedp.ID("setup-name"), "typed"), chromedp.Click(chromedp.ID("setup-interactive")))
	admin.waitText("#session-state", "waiting for you")
	admin.do("connect", chromedp.WaitVisible(chromedp.ID("terminal-panel")), chromedp.Click(chromedp.ID("term-connect")))
	admin.waitText("#term-status", "connected to")
	admin.waitJS(`document.querySelector("#term-xterm .xterm") !== null`)
	typeLine := func(s string) {
		admin.do("type "+s, chromedp.Click(chromedp.CSS("#term-xterm .xterm")), chromedp.SendKeys(chromedp.CSS("#term-xterm textarea"), s+kb.Enter))
	}
	typeLine("echo written-$((6*7)) > /etc/berth-page; cat /etc/berth-page")
	admin.waitJS(`(document.getElementById("images-panel").berthTranscript || "").includes("written-42")`)
	// xterm drew it: its buffer holds the line.
	admin.waitJS(`(function () { const b = document.getElementById("images-panel").berthTerm._core.buffer; for (let i = 0; i < b.lines.length; i++) { if (b.translateBufferLineToString(i, true) === "written-42") return true; } return false; })()`)
	screenshot(t, admin.ctx, "img-10-xterm")
	reconnectKeepsBytes(t, admin, typeLine, "docker")
	screenshot(t, admin.ctx, "img-11-reconnected")

	admin.do("capture and promote", chromedp.Click(chromedp.ID("capture-promote")), chromedp.Click(chromedp.ID("session-capture")))
	admin.waitText("#session-state", "captured and promoted")
	admin.waitText("#drift", "relinked")
	admin.waitText("#templates .tpl-state", "active")
	screenshot(t, admin.ctx, "img-12-promoted")

	// Editing the image field changes the source: the template no longer
	// applies (detached).
	admin.do("edit the image field", chromedp.Navigate(page+"?edit="+box.ID), chromedp.WaitVisible(chromedp.ID("cfg-image")),
		chromedp.Clear(chromedp.ID("cfg-image")), chromedp.SendKeys(chromedp.ID("cfg-image"), reg.Host+"/berth-edited:v1"),
		chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`location.search.includes("saved=")`)
	admin.waitText("#drift", "detached")
	admin.do("the saved page", chromedp.Click(chromedp.CSS(`nav.sections a[data-section="images"]`)), chromedp.WaitVisible(chromedp.ID("images-panel")),
		chromedp.WaitVisible(chromedp.ID("drift-note-detached")))
	if s := admin.text("#drift-note-detached"); !strings.Contains(s, "new leases use the image, not the template") {
		t.Errorf("the detached drift's notice: %q", s)
	}
	screenshot(t, admin.ctx, "img-13-detached")
	storyState(t, admin.ctx, "active-image drift", "#drift-note-detached", "new leases use the image, not the template")
}
