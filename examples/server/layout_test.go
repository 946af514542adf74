package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

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
)

// pageSections are the sections of the Environments page's navigation,
// each shown alone at #id.
var pageSections = []string{"environments", "images", "assignments", "runs", "leases", "settings"}

// The page's layout (issue 53 item 6) in a real browser at 1280 and
// 400 px: a navigation of sections (Environments, Images, Assignments,
// Runs, Leases, Settings, Sessions) where the address names the section
// shown (a reload keeps it, switching company keeps it) and the front
// door shows Environments; each driver's editor (local, SSH, Docker,
// Daytona) with its basic fields first and the fields the driver's schema
// marks Advanced in a closed group, open when one of them is set; a save
// that leaves "Saved — revision N" until the next edit; and at 400 px no
// section scrolls sideways; a run target that cannot host the runner
// (Daytona) offered disabled with why. Screenshots at both widths.
func TestPageLayoutInABrowser(t *testing.T) {
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{local.New(nil), ssh.New(nil), docker.New(nil), daytona.New(nil), fake.New(nil)}})
	var tuned environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "tuned-sandbox-with-a-long-name", "driver": "fake", "description": "a fake sandbox whose region is set",
			"config": map[string]any{"region": "eu-west-9"}}}).decode(t, &tuned)
	var cloud environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "cloud", "driver": "daytona", "config": map[string]any{"api_url": "https://dt.example.test/api",
			"api_key": "dtn-0123456789abcdef", "snapshot_id": "0b6f3c0e-6d1c-4c8e-9a57-1d2f3e4a5b6c"}}}).decode(t, &cloud)
	admin, page, _ := imagesPage(t, e)
	admin.do("the environments", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("envs")))
	if n := admin.count("#start-here"); n != 0 {
		t.Errorf("with environments besides the local one the page still says where to start (%d notices)", n)
	}

	shown := func() []string {
		t.Helper()
		s, err := chromedp.Run(admin.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("main > section.tab")).filter(s => !s.hidden && s.checkVisibility()).map(s => s.id)`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	current := func() string {
		return admin.attr(`nav.sections a[aria-current="page"]`, "data-section")
	}
	// noSidewaysScroll fails the test if the page is wider than the
	// viewport.
	// It measures until the page fits or five seconds pass (a page that
	// the script is still filling, or whose style sheet is still coming
	// on a loaded machine, may be wide for a moment; the bound only ends
	// the wait).
	noSidewaysScroll := func(what string) {
		t.Helper()
		var w []int
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var err error
			w, err = chromedp.Run(admin.ctx, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
			if err != nil {
				t.Fatal(err)
			}
			if w[0] <= w[1] || time.Now().After(deadline) {
				break
			}
		}
		if w[0] > w[1] {
			wide, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("main *")).filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && e.checkVisibility()).slice(0, 5).map(e => e.tagName + "#" + e.id + "." + e.className)`))
			t.Errorf("%s: the page is %d px wide in a %d px viewport (it scrolls sideways); too wide: %q", what, w[0], w[1], wide)
		}
	}
	at := func(width int64) {
		t.Helper()
		admin.do("viewport", chromedp.EmulateViewport(width, 900))
	}

	// The front door shows Environments; each link shows its section
	// alone and names it in the address.
	admin.do("the front door", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("envs")))
	admin.waitJS(`document.getElementById("images").hidden`)
	if got := shown(); len(got) != 1 || got[0] != "environments" || current() != "environments" {
		t.Errorf("the front door shows %v (current %q), want environments alone", got, current())
	}
	if s := admin.text("nav.sections"); !strings.Contains(s, "Sessions") {
		t.Errorf("the administrator's navigation: %q", s)
	}
	for _, width := range []int64{1280, 400} {
		at(width)
		for _, sec := range pageSections {
			admin.do("open "+sec, chromedp.Click(chromedp.CSS(`nav.sections a[data-section="`+sec+`"]`)))
			admin.waitJS(`location.hash === "#` + sec + `" && !document.getElementById("` + sec + `").hidden`)
			if got := shown(); len(got) != 1 || got[0] != sec || current() != sec {
				t.Errorf("at %d px, #%s shows %v (current %q)", width, sec, got, current())
			}
			noSidewaysScroll(sec + " at " + itoa(uint64(width)) + " px")
			screenshot(t, admin.ctx, "layout-"+sec+"-"+itoa(uint64(width)))
		}
	}
	// The Sessions page (the administrator's) has the same navigation.
	admin.do("open sessions", chromedp.Click(chromedp.CSS(`nav.sections a[href="`+sessionsPagePath+`"]`)), chromedp.WaitVisible(chromedp.CSS("#sessions table")))
	if current := admin.attr(`nav.sections a[aria-current="page"]`, "href"); current != sessionsPagePath {
		t.Errorf("the sessions page's current section: %q", current)
	}
	noSidewaysScroll("the sessions page at 400 px")
	screenshot(t, admin.ctx, "layout-sessions-400")
	at(1280)
	screenshot(t, admin.ctx, "layout-sessions-1280")
	// A reload keeps the section; switching company keeps it too.
	admin.do("reload on runs", chromedp.Navigate(page+"#runs"), chromedp.WaitVisible(chromedp.ID("run-form")))
	// A target that cannot host the runner is offered disabled, with why.
	if admin.count(`#run-target option[value="`+cloud.ID+`"][disabled]`) != 1 || admin.count(`#run-target option[value="`+tuned.ID+`"]:not([disabled])`) != 1 ||
		!strings.Contains(admin.text(`#run-target option[value="`+cloud.ID+`"]`), "cannot host runs") {
		t.Errorf("the run targets: the daytona one %q (disabled: %d), the fake one enabled: %d", admin.text(`#run-target option[value="`+cloud.ID+`"]`),
			admin.count(`#run-target option[value="`+cloud.ID+`"][disabled]`), admin.count(`#run-target option[value="`+tuned.ID+`"]:not([disabled])`))
	}
	storyState(t, admin.ctx, "unsupported capability", `#run-target option[value="`+cloud.ID+`"]`, "cannot host runs")
	admin.do("to assignments", chromedp.Click(chromedp.CSS(`nav.sections a[data-section="assignments"]`)),
		chromedp.WaitVisible(chromedp.ID("bind-form")), chromedp.Clear(chromedp.ID("company")), chromedp.SendKeys(chromedp.ID("company"), "acme"),
		chromedp.Click(chromedp.ID("company-switch")))
	admin.waitJS(`location.search.includes("company=acme") && location.hash === "#assignments" && document.readyState === "complete"`)
	if got := shown(); len(got) != 1 || got[0] != "assignments" {
		t.Errorf("after switching company the page shows %v, want assignments", got)
	}
	if s := admin.text("#assign-h"); !strings.HasPrefix(s, "Assignments in acme") {
		t.Errorf("the assignments after switching company: %q", s)
	}

	// The editors: basic fields first, the schema's advanced ones in a
	// closed group.
	for _, tc := range []struct {
		driver, path     string
		basic, advanced  []string
		advancedOpen     bool
		required, absent []string
	}{
		{driver: "docker", path: "?new=docker",
			basic:    []string{"image", "pull_policy", "cpus", "memory", "pids_limit", "network", "workdir"},
			advanced: []string{"host", "registry_auth", "ports", "readonly_rootfs", "user", "env", "labels", "startup_timeout", "capture_repository", "runtime"},
			required: []string{"image"}},
		{driver: "ssh", path: "?new=ssh",
			basic:    []string{"host", "port", "user", "private_key", "known_hosts", "workdir"},
			advanced: []string{"connect_timeout", "keepalive", "max_sessions", "forwarding"},
			required: []string{"host", "user", "private_key"}},
		{driver: "daytona", path: "?new=daytona",
			basic:    []string{"api_url", "api_key", "snapshot_id"},
			advanced: []string{"organization_id", "target", "env", "labels", "auto_stop_interval", "auto_archive_interval", "auto_delete_interval", "exec_timeout", "reactivate_snapshot"},
			required: []string{"api_url", "api_key", "snapshot_id"}},
		{driver: "local", path: "?edit=" + localEnvID(t, e),
			basic: []string{"workdir"}, advanced: []string{"shell"}},
		{driver: "fake", path: "?edit=" + tuned.ID,
			basic: []string{"image", "cpus", "api_key"}, advanced: []string{"region", "startup_timeout", "notes"}, advancedOpen: true},
	} {
		admin.do("open the "+tc.driver+" editor", chromedp.Navigate(page+tc.path), chromedp.WaitVisible(chromedp.ID("editor")))
		basic, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#editor fieldset > .field")).map(f => f.dataset.field)`))
		advanced, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#editor details.advanced .field")).map(f => f.dataset.field)`))
		if strings.Join(basic, ",") != strings.Join(tc.basic, ",") || strings.Join(advanced, ",") != strings.Join(tc.advanced, ",") {
			t.Errorf("the %s editor: basic %v, advanced %v; want %v and %v", tc.driver, basic, advanced, tc.basic, tc.advanced)
		}
		for _, f := range tc.required {
			if s := admin.text(`.field[data-field="` + f + `"] label`); !strings.Contains(s, "(required)") {
				t.Errorf("the %s editor's %s reads %q", tc.driver, f, s)
			}
		}
		open, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[bool](`document.getElementById("advanced").open`))
		if open != tc.advancedOpen {
			t.Errorf("the %s editor's Advanced group open: %v, want %v", tc.driver, open, tc.advancedOpen)
		}
		if s := admin.text("#advanced > summary"); !strings.HasPrefix(s, "Advanced") || !strings.Contains(s, itoa(uint64(len(tc.advanced)))+" more setting") {
			t.Errorf("the %s editor's Advanced summary: %q", tc.driver, s)
		}
		if tc.advancedOpen {
			if s := admin.text("#advanced > summary"); !strings.Contains(s, "changed from their defaults") {
				t.Errorf("the open Advanced summary: %q", s)
			}
		}
		for _, width := range []int64{1280, 400} {
			at(width)
			noSidewaysScroll("the " + tc.driver + " editor at " + itoa(uint64(width)) + " px")
		}
		at(1280)
		// The editor's Storybook state: its screenshots at both widths.
		reads := []string{"#advanced > summary", itoa(uint64(len(tc.advanced))) + " more setting"}
		if len(tc.required) > 0 {
			reads = append(reads, `.field[data-field="`+tc.required[0]+`"] label`, "(required)")
		}
		if st := map[string]string{"docker": "Docker editor", "ssh": "SSH editor", "daytona": "Daytona editor", "local": "local editor"}[tc.driver]; st != "" {
			storyState(t, admin.ctx, st, reads...)
		} else {
			screenshot(t, admin.ctx, "layout-editor-"+tc.driver+"-1280")
		}
	}
	// Capabilities in words, each with its token.
	admin.do("docker capabilities", chromedp.Navigate(page+"?new=docker"), chromedp.WaitVisible(chromedp.ID("caps")))
	if s := admin.text(`#caps li[data-cap="destroy_by_id"]`); s != "cleans up a sandbox by its id destroy_by_id" {
		t.Errorf("the docker editor's destroy_by_id capability reads %q", s)
	}
	if s := admin.text(`#drivers-table tr[data-driver="docker"] .cap[data-cap="runner_ingress"]`); s != "hosts berth's runner" ||
		admin.attr(`#drivers-table tr[data-driver="docker"] .cap[data-cap="runner_ingress"]`, "title") != "runner_ingress" {
		t.Errorf("the docker driver's runner_ingress capability reads %q", s)
	}
	storyState(t, admin.ctx, "supported vs unavailable capabilities", `#caps li[data-cap="destroy_by_id"]`, "cleans up a sandbox by its id destroy_by_id",
		`#drivers-table tr[data-driver="docker"] .cap[data-cap="runner_ingress"]`, "hosts berth's runner")

	// Save pending: the browser holds the save's request (DevTools' Fetch
	// domain pauses it before it leaves) while the page says so with Save
	// disabled; then lets it go. Save success: "Saved — revision N" stays
	// after the page reloads, until the next edit.
	admin.do("open tuned", chromedp.Navigate(page+"?edit="+tuned.ID), chromedp.WaitVisible(chromedp.ID("editor")))
	save := holdRequests(t, admin.ctx, "*/api/v1/environments/"+tuned.ID, "PATCH")
	admin.do("save tuned", chromedp.SetValue(chromedp.ID("f-description"), "a fake sandbox in eu-west-9"), chromedp.Click(chromedp.ID("save")))
	release := save()
	if disabled, err := chromedp.Run(admin.ctx, chromedp.Evaluate[bool](`document.getElementById("save").disabled`)); err != nil || !disabled {
		t.Errorf("while the save is in flight, Save is enabled (%v)", err)
	}
	storyState(t, admin.ctx, "save pending", "#save-status", "Saving…")
	release()
	admin.waitJS(`location.search.includes("saved=2") && document.getElementById("saved-badge") !== null`)
	if s := admin.text("#save-status"); s != "Saved — revision 2" {
		t.Errorf("after the save the status reads %q", s)
	}
	screenshot(t, admin.ctx, "layout-saved")
	storyState(t, admin.ctx, "save success", "#save-status", "Saved — revision 2")
	admin.do("edit again", chromedp.SendKeys(chromedp.ID("f-description"), "!"))
	admin.waitJS(`document.getElementById("saved-badge") === null`)
	// A saved=N that is no longer the revision claims nothing.
	admin.do("stale saved", chromedp.Navigate(page+"?edit="+tuned.ID+"&saved=1"), chromedp.WaitVisible(chromedp.ID("editor")))
	if admin.count("#saved-badge") != 0 {
		t.Error("the page says saved for a revision that is not the environment's")
	}

	// Live leases: the Leases section follows the server's stream; a
	// lease acquired elsewhere shows without a reload and goes once it is
	// released.
	admin.do("the leases", chromedp.Navigate(page+"?company=acme#leases"), chromedp.WaitVisible(chromedp.ID("leases-table")))
	admin.waitText("#leases-table tbody", "No live leases.")
	h, err := e.s.sys.Leases().Acquire(t.Context(), adminPrincipal, lease.AcquireRequest{Company: "acme", EnvironmentID: tuned.ID})
	if err != nil {
		t.Fatal(err)
	}
	admin.waitText(`#leases-table tr[data-lease="`+h.ID()+`"]`, "tuned-sandbox-with-a-long-name")
	admin.waitText("#leases-h", "1 live")
	admin.waitText(`nav.sections a[data-section="leases"] .count`, "1")
	screenshot(t, admin.ctx, "layout-live-lease")
	if _, err := h.Release(t.Context(), lease.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	admin.waitText("#leases-table tbody", "No live leases.")
	admin.waitText("#leases-h", "0 live")

	// The advanced group opens by keyboard: its summary is reached and
	// Enter opens it.
	admin.do("docker editor", chromedp.Navigate(page+"?new=docker"), chromedp.WaitVisible(chromedp.ID("editor")),
		chromedp.Focus(chromedp.CSS("#advanced > summary")), chromedp.KeyEvent("\r"))
	admin.waitJS(`document.getElementById("advanced").open && document.getElementById("cfg-host").checkVisibility()`)

	// Pin to digest beside the Docker editor's image field: the tag
	// becomes repo@sha256:… of the registry's manifest; a tag the
	// registry lacks is said so, and the field keeps what was typed.
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	admin.do("pin a tag", chromedp.SetValue(chromedp.ID("cfg-image"), img.TagRef), chromedp.Click(chromedp.CSS(`button.pin[data-for="image"]`)))
	admin.waitText("#pin-image", "Pinned "+img.TagRef+" to its digest. Save to keep it.")
	if v, err := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.getElementById("cfg-image").value`)); err != nil || v != img.Ref {
		t.Errorf("after Pin the image field holds %q (%v), want %q", v, err, img.Ref)
	}
	screenshot(t, admin.ctx, "layout-pinned")
	admin.do("pin a tag the registry lacks", chromedp.SetValue(chromedp.ID("cfg-image"), img.Repo+":nosuch"), chromedp.Click(chromedp.CSS(`button.pin[data-for="image"]`)))
	admin.waitText("#pin-image", "Not pinned: ")
	if v, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.getElementById("cfg-image").value`)); v != img.Repo+":nosuch" {
		t.Errorf("a failed pin changed the field to %q", v)
	}
	screenshot(t, admin.ctx, "layout-pin-failed")
	// The route needs the right to create environments.
	e.must(t, http.StatusForbidden, call{method: "POST", path: "/api/v1/images/pin", token: tokBoard, body: map[string]any{"reference": img.TagRef}})
	e.must(t, http.StatusBadRequest, call{method: "POST", path: "/api/v1/images/pin", token: tokAdmin, body: map[string]any{"reference": "UPPER/Case:!"}})
}

// localEnvID is the id of the server's managed local environment.
func localEnvID(t *testing.T, e *tenv) string {
	t.Helper()
	for _, v := range e.s.mustList(t) {
		if v.Driver == "local" {
			return v.ID
		}
	}
	t.Fatal("no local environment")
	return ""
}

// holdRequests pauses, in the browser tab of ctx, the next request whose
// URL matches pattern (DevTools' wildcard) and whose method is method;
// other matching requests go on at once. It returns wait: wait blocks
// until that request is held (failing t after a minute) and returns
// release, which lets it go on and ends the interception.
func holdRequests(t *testing.T, ctx context.Context, pattern, method string) (wait func() (release func())) {
	t.Helper()
	paused := make(chan *fetch.EventRequestPaused, 16)
	lctx, stop := context.WithCancel(ctx)
	if err := chromedp.Listen(lctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			select {
			case paused <- e:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern}}}); err != nil {
		stop()
		t.Fatal(err)
	}
	let := func(id fetch.RequestID) {
		if _, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id}); err != nil {
			t.Errorf("let the request go on: %v", err)
		}
	}
	return func() func() {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case e := <-paused:
				if e.Request == nil || e.Request.Method != method {
					let(e.RequestID)
					continue
				}
				return func() {
					let(e.RequestID)
					if _, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{}); err != nil {
						t.Errorf("end the interception: %v", err)
					}
					stop()
				}
			case <-timeout:
				stop()
				t.Fatalf("no %s request to %s within a minute", method, pattern)
			}
		}
	}
}
