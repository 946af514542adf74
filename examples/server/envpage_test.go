package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/workspace"
)

// tab is one browser tab of a page test.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// do runs the actions of step, failing the test on an error.
func (b tab) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	// The page's deferred script has run once the document is complete:
	// before that, a click would miss its handlers.
	b.waitJS(`document.readyState === "complete"`)
	start := time.Now()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", step, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		b.t.Logf("%s took %s", step, d.Round(time.Millisecond))
	}
}

// text returns the text of the first element matching css.
func (b tab) text(css string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[*string](fmt.Sprintf("(document.querySelector(%q)||{}).textContent", css)))
	if err != nil || s == nil {
		b.t.Fatalf("read %s: none (%v)", css, err)
	}
	return *s
}

// count returns how many elements match css.
func (b tab) count(css string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", css)))
	if err != nil {
		b.t.Fatalf("count %s: %v", css, err)
	}
	return n
}

// waitText waits until the element matching css holds want (the bound
// only keeps a broken page from hanging the test; no timing is asserted).
func (b tab) waitText(css, want string) string {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute)
	defer logSlow(b.t, time.Now(), css)
	for {
		s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q)||{}).textContent||''", css)))
		if err != nil {
			b.t.Fatalf("read %s: %v", css, err)
		}
		if strings.Contains(s, want) {
			return s
		}
		if time.Now().After(deadline) {
			screenshot(b.t, b.ctx, "failed-wait")
			b.t.Fatalf("%s holds %q, want it to hold %q", css, s, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitJS waits until the expression is true.
func (b tab) waitJS(expr string) {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute)
	defer logSlow(b.t, time.Now(), expr)
	for {
		// A navigation may end an evaluation: try again.
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			screenshot(b.t, b.ctx, "failed-wait")
			b.t.Fatalf("wait for %s: %v", expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logSlow logs a wait that took more than 3 s (for reading the test's
// time, never asserted).
func logSlow(t *testing.T, start time.Time, what string) {
	if d := time.Since(start); d > 3*time.Second {
		t.Logf("waiting for %s took %s", what, d.Round(time.Millisecond))
	}
}

// source returns the page's DOM as HTML. It is read by evaluating
// document.documentElement.outerHTML in the page as it is then: reading a
// node by the id a DOM snapshot gave it fails ("No node with given id")
// when the page navigated in between (a save reloads it), so a navigation
// that ends the evaluation is tried again, as waitJS does.
func (b tab) source() string {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
		if err == nil {
			return s
		}
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			b.t.Fatalf("read the page's source: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newTab opens another tab in the same browser context as parent.
func newTab(t *testing.T, parent context.Context, opts ...chromedp.ContextOption) tab {
	ctx, cancel := chromedp.NewContext(parent, opts...)
	t.Cleanup(cancel)
	return tab{t: t, ctx: ctx}
}

// teeHandler keeps every response's headers and body, for the canary.
type teeHandler struct {
	next http.Handler
	mu   sync.Mutex
	seen bytes.Buffer
}

type teeWriter struct {
	http.ResponseWriter
	h *teeHandler
}

func (w teeWriter) Write(b []byte) (int, error) {
	w.h.mu.Lock()
	w.h.seen.Write(b)
	w.h.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (h *teeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.next.ServeHTTP(teeWriter{w, h}, r)
	h.mu.Lock()
	for k, vs := range w.Header() {
		fmt.Fprintf(&h.seen, "%s: %s\n", k, strings.Join(vs, ","))
	}
	h.mu.Unlock()
}

func (h *teeHandler) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen.String()
}

// The operator's Environments page (SPEC UI-1, UI-2, UI-3, UI-5, UI-6 and
// the instance settings) in a real browser, walked as an operator does,
// by clicking and typing, with DOM assertions: the first-start login
// link; an SSH environment created with a pasted key that neither the
// page source, nor any response, log line or database file holds; its
// Test succeeding on the real sshd, and failing with a wrong key naming
// user@host:port; the local row without a Test button; a Docker
// environment whose engine is unreachable shown unavailable; two tabs
// editing one environment getting the conflict; a workspace bound to a
// Docker environment, resolved, and a command run there with its output,
// exit status and lease receipt read in the page; delete showing its
// blast radius; the instance settings' states; a board member finding no
// mutation control and an agent no page; the editor walked by keyboard
// with every control labelled. Each state leaves a screenshot
// (BERTH_SCREENSHOTS, else the test's artifact directory).
func TestEnvironmentsPageInABrowser(t *testing.T) {
	srv := testenv.SSHD(t)
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	bin, _ := testenv.RunnerBinarySum(t)
	spec, err := runnerSpecOf(bin)
	if err != nil {
		t.Fatal(err)
	}
	mb := make([]byte, 6)
	rand.Read(mb)
	mark := hex.EncodeToString(mb)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/page", mark)

	e := newEnv(t, "sqlite", &envOpts{
		drivers:   []drivers.Driver{local.New(nil), ssh.New(nil), docker.New(nil), daytona.New(nil), fake.New(nil)},
		runnerSet: drivers.RunnerSetOf(spec),
	})
	// A fixed clock: times read "3 min ago" whatever the machine's speed.
	fixed := time.Now().Add(3 * time.Minute)
	e.s.now = func() time.Time { return fixed }
	tee := &teeHandler{next: e.s.Handler()}
	ts := httptest.NewServer(tee)
	t.Cleanup(ts.Close)
	link, err := e.s.host.ensureAdmin(t.Context(), fixed)
	if err != nil || link == "" {
		t.Fatalf("ensureAdmin: %q, %v", link, err)
	}
	page := ts.URL + envPagePath

	root := startBrowser(t, 4*time.Minute)
	admin := tab{t: t, ctx: root}

	// The first-start link signs the administrator in; the landing page
	// leads to Settings → Environments.
	admin.do("log in with the link", chromedp.Navigate(ts.URL+"/login?link="+url.QueryEscape(link)),
		chromedp.Click(chromedp.CSS(`a[href="`+envPagePath+`"]`)), chromedp.WaitVisible(chromedp.ID("envs")))
	if s := admin.text("#who"); !strings.Contains(s, `instance_admin "admin"`) {
		t.Errorf("signed in as %q", s)
	}
	// With only the managed local environment saved, the page says what
	// to do first.
	if s := admin.text("#start-here"); !strings.Contains(s, "Start here. Only this host is saved") || !strings.Contains(s, "envctl image load image.tar") {
		t.Errorf("the first page after login: %q", s)
	}
	screenshot(t, admin.ctx, "p00-start-here")
	// The managed local row: no Test button, and no Delete (the library
	// refuses to delete it: an action that can only fail is not offered);
	// times relative, exact on hover.
	if n := admin.count(`tr[data-name="local"] button.delete`); n != 0 || admin.count(`tr[data-name="local"] button.archive`) != 1 {
		t.Errorf("the local row offers %d Delete buttons, want none (and Archive)", n)
	}
	if admin.count(`tr[data-name="local"]`) != 1 || admin.count(`tr[data-name="local"] button.test`) != 0 {
		t.Errorf("the local row: %d rows, %d Test buttons; want 1 row and no Test button",
			admin.count(`tr[data-name="local"]`), admin.count(`tr[data-name="local"] button.test`))
	}
	if s := admin.text(`tr[data-name="local"] time`); s != "3 min ago" {
		t.Errorf("the local row's time reads %q, want 3 min ago", s)
	}
	if title, _ := chromedp.Run(root, chromedp.Evaluate[string](`document.querySelector('tr[data-name="local"] time').title`)); !strings.HasSuffix(title, "UTC") {
		t.Errorf("the exact time on hover is %q", title)
	}
	// The create form never offers local (UI-1); capabilities and limits
	// per driver (UI-2).
	if admin.count(`#new-driver option[value="local"]`) != 0 || admin.count(`#new-driver option[value="ssh"]`) != 1 {
		t.Error("the create form offers local, or does not offer ssh")
	}
	if s := admin.text(`#drivers-table tr[data-driver="ssh"]`); !strings.Contains(s, "available") || !strings.Contains(s, "terminal") || !strings.Contains(s, "no template capture") {
		t.Errorf("the ssh driver row: %q", s)
	}
	// Issue 56: each driver's isolation level, a host target's none.
	if s := admin.text(`#drivers-table tr[data-driver="ssh"] .isolation`); s != "none" {
		t.Errorf("the ssh driver's isolation: %q, want none", s)
	}
	if s := admin.text(`#images`); !strings.Contains(s, "Select an environment") || admin.count(`#images button, #images input`) != 0 {
		t.Errorf("the images placeholder: %q", s)
	}
	screenshot(t, root, "01-environments")

	// The editors come from each driver's schema: Daytona's API key is a
	// required write-only secret, the fake (test mode) is offered, and
	// Docker's pull policy is its enum.
	admin.do("open the daytona form", chromedp.Navigate(page+"?new=daytona"), chromedp.WaitVisible(chromedp.ID("editor")))
	if admin.count(`.field[data-field="api_key"][data-kind="secret"] .req`) != 1 || admin.count(`textarea#cfg-api_key`) != 1 ||
		admin.count(`.field[data-field="snapshot_id"] .req`) != 1 {
		t.Error("the daytona editor does not show its required secret api_key and snapshot_id")
	}
	screenshot(t, root, "01b-daytona-editor")
	admin.do("open the docker form", chromedp.Navigate(page+"?new=docker"), chromedp.WaitVisible(chromedp.ID("editor")))
	if opts, _ := chromedp.Run(root, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#cfg-pull_policy option")).map(o => o.value)`)); strings.Join(opts, ",") != ",missing,always,never" {
		t.Errorf("docker's pull_policy options: %q", opts)
	}
	if admin.count(`#new-driver option[value="fake"]`) != 1 {
		t.Error("the fake driver is not offered in test mode")
	}

	// Create an SSH environment: first without its key (the missing
	// credential shows on its field), then with the key pasted.
	key := srv.ClientKeyPEM()
	lines := strings.Split(strings.TrimSpace(key), "\n")
	canary := lines[len(lines)/2]
	admin.do("open the ssh form", chromedp.SetValue(chromedp.ID("new-driver"), "ssh"), chromedp.Click(chromedp.ID("new-open")),
		chromedp.WaitVisible(chromedp.CSS(`#editor[data-driver="ssh"]`)))
	if admin.count(`.field[data-field="host"] .req`) != 1 || admin.count(`.field[data-field="port"] .opt`) != 1 ||
		!strings.Contains(admin.text(`#help-port`), "Default: 22") {
		t.Error("the ssh editor does not show required, optional and defaults from the schema")
	}
	admin.do("fill the ssh form",
		chromedp.SendKeys(chromedp.ID("f-name"), "build-host"),
		chromedp.SendKeys(chromedp.ID("cfg-host"), srv.Host()),
		chromedp.SendKeys(chromedp.ID("cfg-port"), fmt.Sprint(srv.Port())),
		chromedp.SendKeys(chromedp.ID("cfg-user"), srv.User()),
		chromedp.SetValue(chromedp.ID("cfg-known_hosts"), srv.KnownHostsLine()),
		chromedp.SendKeys(chromedp.ID("cfg-workdir"), t.TempDir()),
		chromedp.Evaluate[chromedp.Void](`window.saving = []; new MutationObserver(() => saving.push(document.getElementById("save-status").textContent + "|" + document.getElementById("save").disabled)).observe(document.getElementById("save-status"), {childList: true, subtree: true, characterData: true})`),
		chromedp.Click(chromedp.ID("save")))
	if s := admin.waitText(`[data-error-for="config.private_key"]`, "private_key"); !strings.Contains(s, "missing credentials") {
		t.Errorf("the missing key's error on its field: %q", s)
	}
	// Save pending (the button disabled), then not saved.
	if seen, _ := chromedp.Run(root, chromedp.Evaluate[[]string](`saving`)); len(seen) < 2 || seen[0] != "Saving…|true" || seen[len(seen)-1] != "Not saved.|false" {
		t.Errorf("the save states: %q", seen)
	}
	screenshot(t, root, "02-missing-credentials")
	storyState(t, root, "missing credentials", `[data-error-for="config.private_key"]`, "missing credentials")
	admin.do("paste the key and save", chromedp.SetValue(chromedp.ID("cfg-private_key"), key), chromedp.Click(chromedp.ID("save")),
		chromedp.WaitVisible(chromedp.ID("state-private_key")))
	if s := admin.text("#state-private_key"); s != "set (version 1)" {
		t.Errorf("the saved key reads %q, want set (version 1)", s)
	}
	if strings.Contains(admin.source(), canary) {
		t.Error("the page source holds the pasted key")
	}
	// A host target has no image to qualify: the editor says so.
	if s := admin.text("#qualification"); !strings.HasPrefix(s, "not applicable: a host target runs no image") {
		t.Errorf("the ssh environment's qualification reads %q", s)
	}
	screenshot(t, root, "03-ssh-saved")
	sshID, _ := chromedp.Run(root, chromedp.Evaluate[string](`document.getElementById("editor").dataset.env`))

	// Test it: success on the real sshd with the remote cwd and the
	// platform with its libc.
	row := `tr[data-env="` + sshID + `"]`
	// Every text the result cell shows is kept, to see the pending state.
	admin.do("watch the result", chromedp.Evaluate[chromedp.Void](`window.seen = []; new MutationObserver(() => seen.push(document.getElementById("result-`+sshID+`").textContent)).observe(document.getElementById("result-`+sshID+`"), {childList: true, subtree: true, characterData: true})`))
	admin.do("test the ssh row", chromedp.Click(chromedp.CSS(row+" button.test")))
	if s := admin.waitText("#result-"+sshID, "Reached"); !strings.Contains(s, "cwd /") || !strings.Contains(s, "libc=") ||
		!strings.Contains(s, "no qualification recorded") {
		t.Errorf("the Test result: %q", s)
	}
	if seen, _ := chromedp.Run(root, chromedp.Evaluate[[]string](`seen`)); len(seen) < 2 || seen[0] != "Testing…" || !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, "Testing… acquire") }) {
		t.Errorf("the pending states of the Test: %q", seen)
	}
	screenshot(t, root, "04-test-ok")

	// Replace the key with a wrong one: "set (version 2)", and Test fails
	// naming user@host:port.
	admin.do("replace the key", chromedp.Click(chromedp.CSS(`button.replace[data-for="private_key"]`)),
		chromedp.SetValue(chromedp.ID("cfg-private_key"), srv.UnauthorizedKeyPEM()), chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`document.getElementById("state-private_key") && document.getElementById("state-private_key").textContent === "set (version 2)"`)
	target := fmt.Sprintf("%s@%s:%d", srv.User(), srv.Host(), srv.Port())
	admin.do("test with the wrong key", chromedp.Click(chromedp.CSS(row+" button.test")))
	if s := admin.waitText("#result-"+sshID, "Failed"); !strings.Contains(s, target) {
		t.Errorf("the failed Test does not name %s: %q", target, s)
	}
	screenshot(t, root, "05-test-wrong-key")

	// A Docker environment whose engine is unreachable: its provider
	// check says unavailable, and so do its row and the Drivers section.
	var dead environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "dead-engine", "driver": "docker", "config": map[string]any{"host": "unix://" + t.TempDir() + "/no-docker.sock", "image": img.Ref}}}).decode(t, &dead)
	admin.do("reload", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("envs")))
	admin.do("check the dead engine", chromedp.Click(chromedp.CSS(`tr[data-env="`+dead.ID+`"] button.health`)))
	admin.waitText("#result-"+dead.ID, "unavailable")
	admin.do("reload", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("envs")))
	if s := admin.text(`tr[data-env="` + dead.ID + `"] .state`); !strings.Contains(s, "unavailable") {
		t.Errorf("the dead engine's row: %q", s)
	}
	if admin.count(`#run-target option[value="`+dead.ID+`"]:not([disabled])`) != 0 {
		t.Error("the run form offers the unavailable environment")
	}
	if s := admin.text(`#drivers-table tr[data-driver="docker"] .health`); !strings.Contains(s, "no-docker.sock: unavailable") {
		t.Errorf("the docker driver's health: %q", s)
	}
	screenshot(t, root, "06-docker-unavailable")
	storyState(t, root, "unavailable provider (engine down)", `tr[data-env="`+dead.ID+`"] .state`, "unavailable",
		`#drivers-table tr[data-driver="docker"] .health`, "no-docker.sock: unavailable")

	// Two tabs edit the local environment: the second save is the
	// conflict, and says to reload.
	var localID string
	for _, r := range e.s.mustList(t) {
		if r.Driver == "local" {
			localID = r.ID
		}
	}
	edit := page + "?edit=" + localID
	other := newTab(t, root)
	admin.do("open the editor", chromedp.Navigate(edit), chromedp.WaitVisible(chromedp.ID("editor")))
	other.do("open the editor in a second tab", chromedp.Navigate(edit), chromedp.WaitVisible(chromedp.ID("editor")))
	// Typed at the end of the stored description (the caret goes there
	// as a person's End key puts it).
	admin.do("save in the first tab", chromedp.Focus(chromedp.ID("f-description")), chromedp.KeyEvent(kb.End), chromedp.KeyEvent(" (first tab)"), chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`location.search.includes("saved=")`)
	other.do("save in the second tab", chromedp.Focus(chromedp.ID("f-description")), chromedp.KeyEvent(kb.End), chromedp.KeyEvent(" (second tab)"), chromedp.Click(chromedp.ID("save")))
	other.waitText("#form-error", "changed by someone else: reload")
	screenshot(t, other.ctx, "07-conflict")
	storyState(t, other.ctx, "save error (stale revision)", "#form-error", "changed by someone else: reload")
	other.do("reload as told", chromedp.Click(chromedp.ID("reload")), chromedp.WaitVisible(chromedp.ID("editor")))
	// The reloaded editor is filled by the page's script: wait for the
	// stored description, then check that the lost edit is not in it.
	other.waitJS(`(document.getElementById("f-description") || {}).value.includes("(first tab)")`)
	if v, _ := chromedp.Run(other.ctx, chromedp.Value(chromedp.ID("f-description"))); v != "This host (managed by the server) (first tab)" {
		t.Errorf("after the reload the description is %q", v)
	}

	// Bind a workspace of acme to a Docker environment, see what a run
	// resolves to, and run a bounded command there.
	var box environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "box", "driver": "docker", "requireIsolation": "container",
			"config": map[string]any{"image": img.Ref, "network": "none", "labels": map[string]string{"test.berth/page": mark}}}}).decode(t, &box)
	admin.do("switch to acme", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("company")),
		chromedp.Clear(chromedp.ID("company")), chromedp.SendKeys(chromedp.ID("company"), "acme"), chromedp.Click(chromedp.ID("company-switch")))
	admin.waitJS(`location.search.includes("company=acme") && document.getElementById("bind-form") !== null`)
	admin.do("bind ws1 to box", chromedp.Click(chromedp.CSS(`nav.sections a[data-section="assignments"]`)), chromedp.SetValue(chromedp.ID("bind-kind"), "workspace"), chromedp.SendKeys(chromedp.ID("bind-key"), "ws1"),
		chromedp.SetValue(chromedp.ID("bind-env"), box.ID), chromedp.Click(chromedp.ID("bind-save")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-binding="workspace/ws1"]`)))
	if s := admin.text(`tr[data-binding="workspace/ws1"]`); !strings.Contains(s, "box") {
		t.Errorf("the binding row: %q", s)
	}
	admin.do("resolve ws1", chromedp.SendKeys(chromedp.ID("res-workspace"), "ws1"), chromedp.Click(chromedp.ID("resolve")))
	admin.waitText("#resolve-result", "resolves to box (docker), by the workspace binding ws1")
	admin.do("run in ws1", chromedp.Click(chromedp.CSS(`nav.sections a[data-section="runs"]`)), chromedp.SendKeys(chromedp.ID("run-workspace"), "ws1"),
		chromedp.SendKeys(chromedp.ID("run-cmd"), "echo hello-from-$(cat /etc/hostname | cut -c1-4)-box; test -f /.dockerenv && echo in-a-container; exit 3"),
		chromedp.Click(chromedp.ID("run-start")))
	admin.waitText("#run-exit", "exit status 3")
	out := admin.waitText("#run-output", "in-a-container")
	if !strings.Contains(out, "hello-from-") {
		t.Errorf("the run's output: %q", out)
	}
	if s := admin.waitText("#run-receipt", "docker"); !strings.Contains(s, "cleanup confirmed") || !strings.Contains(s, "environment "+box.ID) {
		t.Errorf("the lease receipt: %q", s)
	}
	if s := admin.text("#run-proof"); !strings.Contains(s, "ended on its own") {
		t.Errorf("the stop proof: %q", s)
	}
	screenshot(t, root, "08-run-in-docker")

	// issue 52: a run that keeps its lease shows the lease's files: a
	// directory opens to its listing, a file's text is viewed, a path
	// downloads as a tar archive.
	admin.do("held run in ws1", chromedp.SetValue(chromedp.ID("run-cmd"), "mkdir -p notes && echo held-turn-one > notes/a.txt && echo done"),
		chromedp.Click(chromedp.ID("run-hold")), chromedp.Click(chromedp.ID("run-start")))
	admin.waitText("#run-output", "done") // this run's, not the last one's exit below
	if s := admin.waitText("#run-exit", "exit status"); !strings.Contains(s, "exit status 0") {
		t.Fatalf("the held run: %s, output %q, status %q", s, admin.text("#run-output"), admin.text("#run-status"))
	}
	admin.waitText("#files-tree", "notes/")
	admin.do("open notes", chromedp.Click(chromedp.CSS(`li[data-path="notes"] > details > summary`)))
	admin.waitText(`li[data-path="notes"]`, "a.txt (14 bytes)")
	admin.do("view notes/a.txt", chromedp.Click(chromedp.CSS(`li[data-path="notes/a.txt"] button`)))
	admin.waitText("#files-view", "held-turn-one")
	if href, _ := chromedp.Run(root, chromedp.Evaluate[string](`document.querySelector('li[data-path="notes/a.txt"] a').getAttribute("href")`)); !strings.Contains(href, "/files?path=notes%2Fa.txt&archive=1") {
		t.Errorf("the download link of notes/a.txt: %q", href)
	}
	screenshot(t, root, "08b-held-run-files")
	held := admin.text("#files-lease")

	// issue 52 item 5: a workspace prepared in the held lease (an
	// uploaded tar), then the workspace's next held run runs in it; the
	// files panel shows its checkpoint, what the run changed, and its tree.
	var ws workspace.Workspace
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/leases/" + held + "/workspace?key=ws1", token: tokAdmin,
		header: map[string]string{"Content-Type": tarType}, body: string(tarBytes(t, [2]string{"main.c", "int main(){}\n"}))}).decode(t, &ws)
	admin.do("held run in the workspace", chromedp.SetValue(chromedp.ID("run-cmd"), "echo fixed >> main.c && echo new > new.txt && pwd"),
		chromedp.Click(chromedp.ID("run-start")))
	admin.waitText("#run-output", ws.Dir) // the task's working directory
	if s := admin.waitText("#run-exit", "exit status"); !strings.Contains(s, "exit status 0") {
		t.Fatalf("the run in the workspace: %s, output %q", s, admin.text("#run-output"))
	}
	admin.waitText(`#files-workspaces .ws-changed`, "main.c new.txt")
	if s := admin.text("#files-workspaces"); !strings.Contains(s, "Workspace ws1 ("+ws.ID+")") || !strings.Contains(s, "tree "+ws.Checkpoint.Tree) {
		t.Errorf("the workspace panel: %q", s)
	}
	admin.waitText("#files-where", "The files of workspace ws1")
	admin.waitText("#files-tree", "new.txt")
	screenshot(t, root, "08c-held-run-workspace")
	var rel lease.Lease
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/leases/" + held + "/release", token: tokAdmin}).decode(t, &rel)
	if rel.Status != lease.StatusReleased {
		t.Errorf("the held lease %s after its release: %s", held, rel.Status)
	}

	// issue 52 item 5: the run form takes the project, as an archive: the
	// page prepares it as the workspace in a held lease (through the API),
	// then the command runs in it, and what it changed shows (a new
	// workspace: the last one ended with its lease).
	projTar := filepath.Join(t.TempDir(), "app.tar")
	if err := os.WriteFile(projTar, tarBytes(t, [2]string{"main.c", "int main(){ return 1; }\n"}), 0o644); err != nil {
		t.Fatal(err)
	}
	admin.do("a run with its project", chromedp.SetValue(chromedp.ID("run-workspace"), "ws1"),
		chromedp.SetUploadFiles(chromedp.ID("run-archive"), []string{projTar}),
		chromedp.SetValue(chromedp.ID("run-cmd"), "cat main.c && echo '/* fixed */' >> main.c"),
		chromedp.Click(chromedp.ID("run-start")))
	admin.waitText("#run-output", "return 1;")
	if s := admin.waitText("#run-exit", "exit status"); !strings.Contains(s, "exit status 0") {
		t.Fatalf("the run with its project: %s, output %q, status %q", s, admin.text("#run-output"), admin.text("#run-status"))
	}
	admin.waitText(`#files-workspaces .ws-changed`, "main.c")
	if s := admin.text("#files-workspaces"); !strings.Contains(s, "Workspace ws1 (") || strings.Contains(s, ws.ID) {
		t.Errorf("the workspace panel after a run with its project: %q", s)
	}
	screenshot(t, root, "08d-run-with-its-project")
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/leases/" + admin.text("#files-lease") + "/release", token: tokAdmin})

	// Test box in acme: a pinned image, so the probe records a
	// qualification, shown in the editor; a new registry credential (a
	// Replace of the optional secret) changes the account, and the
	// record no longer applies; Clear saves the config without it.
	regSecret := "s3cret-" + hex.EncodeToString(mb[:3]) + "-registry"
	admin.do("test box", chromedp.Click(chromedp.CSS(`nav.sections a[data-section="environments"]`)), chromedp.Click(chromedp.CSS(`tr[data-env="`+box.ID+`"] button.test`)))
	admin.waitText("#result-"+box.ID, "qualification recorded")
	admin.do("open box", chromedp.Click(chromedp.CSS(`tr[data-env="`+box.ID+`"] a.edit`)))
	admin.waitJS(`document.getElementById("qualification") !== null`)
	if s := admin.text("#qualification"); !strings.HasPrefix(s, "recorded: linux/") || !strings.Contains(s, "isolation container measured") {
		t.Errorf("the qualification after the Test: %q", s)
	}
	// Issue 56: the isolation it declares and the one it requires.
	if s := admin.text("#isolation"); !strings.Contains(s, "Isolation: container") || !strings.Contains(s, "requires container") {
		t.Errorf("box's isolation: %q", s)
	}
	screenshot(t, root, "09-qualified")
	if admin.count(`.field[data-field="registry_auth"] button.clear`) != 0 {
		t.Error("an unset secret offers Clear")
	}
	admin.do("set a registry credential", chromedp.SetValue(chromedp.ID("cfg-registry_auth"), "robot:"+regSecret), chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`document.getElementById("state-registry_auth") && document.getElementById("state-registry_auth").textContent === "set (version 1)"`)
	if s := admin.text("#qualification"); !strings.HasPrefix(s, "absent") {
		t.Errorf("the qualification after the account changed: %q", s)
	} else {
		t.Logf("the qualification after the account changed: %s", s)
	}
	screenshot(t, root, "10-qualification-stale")
	admin.do("clear the credential", chromedp.Click(chromedp.CSS(`button.clear[data-for="registry_auth"]`)), chromedp.Click(chromedp.ID("save")))
	admin.waitJS(`location.search.includes("saved=") && document.getElementById("state-registry_auth") === null && document.getElementById("cfg-registry_auth") !== null`)
	if strings.Contains(admin.source(), regSecret) {
		t.Error("the page holds the registry credential")
	}

	// Delete shows the blast radius first: the binding blocks nothing
	// but is named; cancelling keeps it.
	admin.do("delete box?", chromedp.Click(chromedp.CSS(`tr[data-env="`+box.ID+`"] button.delete`)))
	admin.waitJS(`!document.getElementById("delete-panel").hidden`)
	if s := admin.text("#delete-radius"); !strings.Contains(s, "bindings: 1") || !strings.Contains(s, "active leases: 0") ||
		!strings.Contains(s, "setup sessions: 0") || !strings.Contains(s, "qualification in acme: recorded") {
		t.Errorf("the blast radius: %q", s)
	}
	screenshot(t, root, "11-delete-radius")
	admin.do("keep it", chromedp.Click(chromedp.ID("delete-cancel")), chromedp.WaitNotVisible(chromedp.ID("delete-panel")))
	if admin.count(`tr[data-env="`+box.ID+`"]`) != 1 {
		t.Error("cancelling the delete removed box")
	}
	// Deleting dead-engine (no binding, no lease) after its radius.
	admin.do("delete dead-engine", chromedp.Click(chromedp.CSS(`tr[data-env="`+dead.ID+`"] button.delete`)), chromedp.WaitVisible(chromedp.ID("delete-panel")),
		chromedp.Click(chromedp.ID("delete-confirm")))
	admin.waitJS(`document.querySelector('tr[data-env="` + dead.ID + `"]') === null && document.getElementById("envs") !== null`)

	// Keyboard: the SSH create form walked with Tab, every control
	// labelled and reached.
	// The Advanced group opened, to reach its fields too.
	admin.do("open the form", chromedp.Navigate(page+"?new=ssh"), chromedp.WaitVisible(chromedp.ID("editor")),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("advanced").open = true`), chromedp.Focus(chromedp.ID("f-name")))
	want, _ := chromedp.Run(root, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#editor input, #editor textarea, #editor select, #editor button")).filter(e => !e.hidden).map(e => e.id)`))
	reached := map[string]bool{}
	for range 3 * len(want) {
		id, _ := chromedp.Run(root, chromedp.Evaluate[string](`document.activeElement.id`))
		label, _ := chromedp.Run(root, chromedp.Evaluate[string](`(function(e){ if (e.getAttribute("aria-label")) return e.getAttribute("aria-label"); if (e.tagName === "BUTTON") return e.textContent.trim(); return e.labels && e.labels.length ? e.labels[0].textContent.trim() : ""; })(document.activeElement)`))
		if id == want[len(want)-1] { // the last control (Test before saving)
			reached[id] = true
			break
		}
		if id != "" {
			reached[id] = true
			if label == "" {
				t.Errorf("control %s has no label", id)
			}
		}
		admin.do("Tab", chromedp.KeyEvent(kb.Tab))
	}
	for _, id := range want {
		if !reached[id] {
			t.Errorf("Tab never reached %s (reached %v)", id, reached)
		}
	}
	screenshot(t, root, "12-keyboard")

	// And the whole page (in acme, with the editor of box): every visible
	// control is reached by Tab, and each has a name.
	// Every section open (a closed one's controls are not reached).
	admin.do("open box", chromedp.Navigate(page+"?company=acme&edit="+box.ID), chromedp.WaitVisible(chromedp.ID("editor")),
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("details").forEach(d => { d.open = true; })`))
	tabWalk(t, admin, `a[href], button:not([disabled]), input:not([type=hidden]), select, textarea`)

	// The instance settings: managed-sandbox-only makes host targets
	// unavailable with the reason and drops them from the create form;
	// environments disabled says what to do. It also means a minimum
	// isolation of container (issue 56): the fake declares none, so its
	// driver row and its environment's row are marked below the minimum.
	var bare environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "bare", "driver": "fake"}}).decode(t, &bare)
	admin.do("managed sandboxes only", chromedp.Navigate(page+"#settings"), chromedp.WaitVisible(chromedp.ID("settings-form")),
		chromedp.Click(chromedp.ID("set-managed")), chromedp.Click(chromedp.ID("settings-save")),
		chromedp.WaitVisible(chromedp.ID("settings-managed-only")))
	if s := admin.text(`#drivers-table tr[data-driver="ssh"] .availability`); !strings.Contains(s, "unavailable") || !strings.Contains(s, "managed") {
		t.Errorf("ssh under managed-sandbox-only: %q", s)
	}
	if admin.count(`#new-driver option[value="ssh"]`) != 0 || !strings.Contains(admin.text(`#unavailable-drivers`), "ssh") {
		t.Error("ssh is still offered under managed-sandbox-only, or not listed with its reason")
	}
	if s := admin.text(`#drivers-table tr[data-driver="fake"] .isolation.below-minimum`); !strings.Contains(s, "below the minimum container") {
		t.Errorf("the fake's isolation under managed-sandbox-only: %q", s)
	}
	if s := admin.text(`tr[data-name="bare"] .isolation.below-minimum`); s != "none" {
		t.Errorf("the bare environment's isolation cell: %q", s)
	}
	if s := admin.text(`tr[data-name="bare"] .reason`); s != "Isolation none is below the minimum container (managed sandboxes only)." {
		t.Errorf("the bare environment's reason: %q", s)
	}
	if s := admin.text(`tr[data-name="box"] .isolation`); s != "container (requires container)" || admin.count(`tr[data-name="box"] .below-minimum, #drivers-table tr[data-driver="docker"] .below-minimum`) != 0 {
		t.Errorf("the docker box's isolation cell %q, or docker marked below the minimum", s)
	}
	screenshot(t, root, "13-managed-only")
	// The lease quotas are settings the page edits (issue 51).
	admin.do("lease quotas", chromedp.SetValue(chromedp.ID("set-quota-company"), "2"), chromedp.SetValue(chromedp.ID("set-quota-env"), "0"),
		chromedp.Click(chromedp.ID("settings-save")))
	admin.waitText("#settings-summary", "lease quotas: 2 per company, no limit per company on one environment")
	// The minimum isolation (issue 56, set through the API) is shown on
	// the run form.
	sr := e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/settings", token: tokAdmin})
	e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/settings", token: tokAdmin,
		header: map[string]string{"If-Match": sr.header.Get("ETag")}, body: map[string]any{"minimumIsolation": "container"}})
	admin.do("the minimum isolation", chromedp.Navigate(page+"?company=acme#runs"), chromedp.WaitVisible(chromedp.ID("run-minimum")))
	if s := admin.text("#run-minimum"); !strings.Contains(s, "Minimum isolation container") {
		t.Errorf("the run form's minimum: %q", s)
	}
	screenshot(t, root, "13b-minimum-isolation")
	admin.do("back to the settings", chromedp.Navigate(page+"#settings"), chromedp.WaitVisible(chromedp.ID("settings-form")))
	admin.do("disable environments", chromedp.Click(chromedp.ID("set-enable")), chromedp.Click(chromedp.ID("settings-save")),
		chromedp.WaitVisible(chromedp.ID("settings-disabled")))
	if s := admin.text("#settings-disabled"); !strings.Contains(s, "turns on “Enable environments” in Settings and saves") {
		t.Errorf("the disabled notice: %q", s)
	}
	// One short sentence per row, the library's whole error on hover.
	if s := admin.text(`tr[data-name="local"] .reason`); s != "Environments are disabled on this instance." {
		t.Errorf("the local row's reason when disabled: %q", s)
	}
	if s, _ := chromedp.Run(root, chromedp.Evaluate[string](`document.querySelector('tr[data-name="local"] .reason').title`)); !strings.Contains(s, "enableEnvironments is off") {
		t.Errorf("the local row's full reason on hover: %q", s)
	}
	screenshot(t, root, "14-disabled")

	// A board member (another browser context: its own cookies) logs in
	// with the form and finds no mutation control, and the redacted view.
	board := newTab(t, root, chromedp.WithNewBrowserContext())
	board.do("board member logs in", chromedp.Navigate(ts.URL+"/login"), chromedp.SendKeys(chromedp.ID("token"), tokBoard),
		chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(`a[href="`+envPagePath+`"]`)),
		chromedp.Navigate(page+"?edit="+sshID), chromedp.WaitVisible(chromedp.ID("envs")))
	// Resolving is a read: its form stays; nothing else takes input.
	const mutations = `main button:not(#resolve), main input:not([id^="res-"]), main select, main textarea, #editor, #new-form, #bind-form, #run-form, #settings-form`
	if ids, _ := chromedp.Run(board.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('`+mutations+`')).map(e => e.id || e.tagName)`)); len(ids) != 0 {
		t.Errorf("the board member's page has mutation controls %v", ids)
	}
	if board.count("#redacted-note") != 1 || strings.Contains(board.source(), srv.Host()+"</") {
		t.Error("the board member does not get the redacted view")
	}
	if s := board.text("#settings-disabled"); !strings.Contains(s, "ask an instance administrator") {
		t.Errorf("the board member's disabled notice: %q", s)
	}
	screenshot(t, board.ctx, "15-board-member")

	// An agent gets no page.
	agent := newTab(t, root, chromedp.WithNewBrowserContext())
	agent.do("agent logs in", chromedp.Navigate(ts.URL+"/login"), chromedp.SendKeys(chromedp.ID("token"), tokAgent),
		chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(`a[href="`+envPagePath+`"]`)),
		chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("no-page")))
	if agent.count("#envs") != 0 {
		t.Error("the agent sees the environments table")
	}
	screenshot(t, agent.ctx, "16-agent")
	storyState(t, agent.ctx, "agent", "#no-page", "This page is for operators; agents use the API.")

	// The pasted key is in no response, log line or database file.
	if strings.Contains(tee.String(), canary) {
		t.Error("a response holds the pasted key")
	}
	if strings.Contains(e.logs.String(), canary) {
		t.Error("the log holds the pasted key")
	}
	if n := testenv.CanaryInFiles(t, canary, "the data directory", e.dir); n == 0 {
		t.Error("the canary scan read no file")
	}
}

// tabWalk presses Tab from the top of the page until the focus has gone
// through every visible control matching sel, checking that each control
// it reaches has an accessible name (a label, aria-label or its text).
func tabWalk(t *testing.T, b tab, sel string) {
	t.Helper()
	want, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`(function(){ let n = 0; return Array.from(document.querySelectorAll('`+sel+`')).filter(e => e.offsetParent !== null && !e.hidden && e.checkVisibility()).map(e => { if (!e.dataset.walk) e.dataset.walk = "w" + (n++); return e.dataset.walk; }); })()`))
	if err != nil || len(want) == 0 {
		t.Fatalf("list the controls: %v (%d)", err, len(want))
	}
	b.do("focus the top", chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)`))
	reached := map[string]bool{}
	for range 2*len(want) + 5 {
		b.do("Tab", chromedp.KeyEvent(kb.Tab))
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`(function(e){ const name = e.getAttribute("aria-label") || (e.labels && e.labels.length ? e.labels[0].textContent : "") || ((e.tagName === "A" || e.tagName === "BUTTON") ? e.textContent : ""); return [e.dataset.walk || "", e.id || e.tagName, name.trim()]; })(document.activeElement)`))
		if err != nil {
			t.Fatal(err)
		}
		if got[0] == "" {
			continue
		}
		if got[2] == "" {
			t.Errorf("control %s has no name", got[1])
		}
		reached[got[0]] = true
		if len(reached) == len(want) {
			break
		}
	}
	if len(reached) != len(want) {
		missed, _ := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("[data-walk]")).map(e => e.dataset.walk + ":" + (e.id || e.tagName + " " + e.textContent.trim().slice(0, 20)))`))
		t.Errorf("Tab reached %d of %d controls; all: %q; reached %v", len(reached), len(want), missed, reached)
	}
}

// mustList lists the environments as the server's operator.
func (s *server) mustList(t *testing.T) []*environment.View {
	t.Helper()
	vs, err := s.sys.Catalog().List(t.Context(), adminPrincipal, environment.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// The page over plain HTTP: signed out it sends to the login form; an
// agent's session gets 403 and no page; an operator's page carries a
// content security policy that runs no inline script, and no inline
// script or style is in it; its assets are served, others are not.
func TestEnvironmentsPageAccess(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	get := func(path string, p *authz.Principal) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", e.ts.URL+path, nil)
		if p != nil {
			tok, _, err := e.s.host.newSession(t.Context(), *p, testSource(t, *p), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			req.AddCookie(&http.Cookie{Name: sessionCookie, Value: tok})
		}
		cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	if res := get(envPagePath, nil); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
		t.Errorf("signed out: %d to %q, want 303 to /login", res.StatusCode, res.Header.Get("Location"))
	}
	agent := authz.Principal{ID: "agent-7", Role: authz.RoleAgent, Companies: []string{"acme"}}
	res := get(envPagePath, &agent)
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusForbidden || strings.Contains(string(body), `id="envs"`) {
		t.Errorf("an agent's page: %d %s", res.StatusCode, body)
	}
	op := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	res = get(envPagePath+"?company=acme", &op)
	body, _ = io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("the operator's page: %d, CSP %q", res.StatusCode, res.Header.Get("Content-Security-Policy"))
	}
	for _, bad := range []string{"<script>", " style=", " onclick=", "javascript:"} {
		if strings.Contains(string(body), bad) {
			t.Errorf("the page holds %q, which its policy would refuse", bad)
		}
	}
	if !strings.Contains(string(body), `<script src="/assets/envs.js" defer></script>`) || !strings.Contains(string(body), `data-company="acme"`) {
		t.Error("the page does not load its script or does not carry the company")
	}
	if res := get("/assets/envs.js", nil); res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("/assets/envs.js: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if res := get("/assets/envs.html", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("/assets/envs.html: %d, want 404 (only scripts and style sheets are served)", res.StatusCode)
	}
}

// Relative times in plain words.
func TestAgo(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "just now", 10 * time.Second: "just now", time.Minute: "1 min ago", 3 * time.Minute: "3 min ago",
		90 * time.Minute: "1 hour ago", 5 * time.Hour: "5 hours ago", 72 * time.Hour: "3 days ago",
	} {
		if got := ago(d); got != want {
			t.Errorf("ago(%s) = %q, want %q", d, got, want)
		}
	}
}

// A provider last measured unavailable is said by its reason: refused
// credentials (a Daytona 401) are not "unreachable".
func TestProviderSentence(t *testing.T) {
	now := time.Now()
	at := now.Add(-3 * time.Minute)
	for code, want := range map[string]string{
		"auth_failed":          "The provider at https://dt.example/api refused the credentials when last checked, 3 min ago. Check the API key",
		"unreachable":          "The provider at https://dt.example/api was unreachable when last checked, 3 min ago.",
		"provider_unavailable": "The provider at https://dt.example/api was unreachable when last checked, 3 min ago.",
		"timeout":              "The provider at https://dt.example/api did not answer in time when last checked, 3 min ago.",
		"image_inactive":       "The provider at https://dt.example/api was unavailable when last checked (image_inactive), 3 min ago.",
	} {
		h := &environment.HealthView{Status: environment.HealthUnavailable, Endpoint: "https://dt.example/api", Code: code, CheckedAt: &at}
		if got := providerSentence(h, now); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q", code, got, want)
		}
	}
}
