package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	gossh "golang.org/x/crypto/ssh"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
)

// The Test result where Test was pressed (issue 53 item 1), for the
// Storybook states Test pending, Test success, qualification absent, auth
// failure, reachability failure and unknown host key (with trust):
// one sentence that names the cause and the target, the qualification
// on its own line, and the probe's summary and stages behind a closed
// "Details" disclosure that Tab reaches, Enter opens and Copy copies;
// the row stays short (no wall of text in a narrow column) at 1280 and
// 400 px.
func TestTestResultInABrowser(t *testing.T) {
	const key = "k-right-0123456789"
	fk := fake.New(&fake.Options{APIKey: key})
	fk.AddImage("registry.fake.test/team/app:v1")
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{fk, ssh.New(nil)}})
	create := func(name, driver string, cfg map[string]any) string {
		var v environment.View
		e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
			body: map[string]any{"name": name, "driver": driver, "config": cfg}}).decode(t, &v)
		return v.ID
	}
	okID := create("floating", "fake", map[string]any{"api_key": key, "image": "registry.fake.test/team/app:v1"})
	authID := create("bad-key", "fake", map[string]any{"api_key": "k-wrong-0123456789"})
	// A closed port: listen, note the port, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := gossh.NewSignerFromKey(priv)
	goneID := create("gone", "ssh", map[string]any{"host": "127.0.0.1", "port": port, "user": "nobody",
		"private_key": string(pem.EncodeToMemory(block)),
		"known_hosts": []any{"[127.0.0.1]:" + strconv.Itoa(port) + " " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))}})
	// An SSH server whose key the environment does not trust yet.
	strangerPort, strangerFP := handshakeServer(t)
	strangerID := create("stranger", "ssh", map[string]any{"host": "127.0.0.1", "port": strangerPort, "user": "nobody",
		"private_key": string(pem.EncodeToMemory(block))})
	// An SSH port that accepts and never answers: its Test stays pending
	// until the connect timeout.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	slowID := create("slow", "ssh", map[string]any{"host": "127.0.0.1", "port": mute.Addr().(*net.TCPAddr).Port, "user": "nobody",
		"private_key": string(pem.EncodeToMemory(block)), "connect_timeout": "5s"})
	admin, page, _ := imagesPage(t, e)
	admin.do("open the page", chromedp.Navigate(page+"?company=acme"), chromedp.WaitVisible(chromedp.ID("envs")))

	type shown struct {
		Sentence, Qualification, Details string
		Open                             bool
		RowHeight                        float64
	}
	read := func(id string) shown {
		t.Helper()
		s, err := chromedp.Run(admin.ctx, chromedp.Evaluate[shown](`(function () {
			const out = document.getElementById("result-`+id+`");
			const q = out.querySelector(".probe-qualification"), d = out.querySelector("details.more");
			return {Sentence: (out.querySelector(".probe-connection, .sentence") || {}).textContent || "",
				Qualification: q ? q.textContent : "", Details: d ? d.querySelector("pre").textContent : "", Open: d ? d.open : false,
				RowHeight: out.closest("tr").getBoundingClientRect().height};
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	test := func(id, want string) shown {
		t.Helper()
		admin.do("test "+id, chromedp.Click(chromedp.CSS(`tr[data-env="`+id+`"] button.test`)))
		admin.waitJS(`document.querySelector("#result-` + id + ` details.more") !== null`)
		s := read(id)
		if !strings.HasPrefix(s.Sentence, want) || strings.Count(strings.TrimSuffix(s.Sentence, "."), ". ") > 0 || len([]rune(s.Sentence)) > 260 {
			t.Errorf("the Test result of %s reads %q, want one sentence starting %q", id, s.Sentence, want)
		}
		if s.Open || !strings.Contains(s.Details, "stage") && !strings.Contains(s.Details, ": ok") && !strings.Contains(s.Details, ": failed") {
			t.Errorf("the Details of %s (open %v): %q", id, s.Open, s.Details)
		}
		// The wall of text made a row 1,870 px high; a sentence,
		// the qualification and the state (now "failing since …") stay
		// under 300.
		limit := 300.0
		if id == strangerID { // the fingerprint, and the fix offered in place
			limit = 400
		}
		if s.RowHeight > limit {
			t.Errorf("the row of %s is %.0f px high after its Test", id, s.RowHeight)
		}
		return s
	}

	// Test pending: what the operator reads while the probe runs.
	admin.do("test slow", chromedp.Click(chromedp.CSS(`tr[data-env="`+slowID+`"] button.test`)))
	admin.waitJS(`document.getElementById("result-` + slowID + `").textContent.startsWith("Testing…")`)
	// The button and the result read in one evaluation, before the story's
	// screenshot: on a loaded machine the probe's connect timeout can pass
	// while the screenshot is taken, and the button is enabled again then.
	pending, err := chromedp.Run(admin.ctx, chromedp.Evaluate[[]bool](`[document.getElementById("result-`+slowID+`").textContent.startsWith("Testing…"),
		document.querySelector('tr[data-env="`+slowID+`"] button.test').disabled]`))
	if err != nil {
		t.Fatal(err)
	}
	if pending[0] && !pending[1] {
		t.Errorf("the Test button of a pending Test is not disabled")
	}
	storyState(t, admin.ctx, "Test pending", "#result-"+slowID, "Testing…")
	admin.waitJS(`document.querySelector("#result-` + slowID + ` details.more") !== null`)

	// Test success: reached, the qualification apart ("not recorded":
	// the image is a tag).
	s := test(okID, "Reached ")
	if !strings.HasPrefix(s.Qualification, "no qualification recorded") || !strings.Contains(s.Qualification, "registry.fake.test/team/app:v1") {
		t.Errorf("the qualification line of the success: %q", s.Qualification)
	}
	screenshot(t, admin.ctx, "t01-test-success")
	storyState(t, admin.ctx, "Test success", "#result-"+okID+" .probe-connection", "Reached provider fake")
	storyState(t, admin.ctx, "qualification absent", "#result-"+okID+" .probe-qualification",
		`no qualification recorded: image "registry.fake.test/team/app:v1" is a mutable tag: pin it by digest`)
	// Auth failure: the key is refused, said as such, naming the target.
	s = test(authID, "Failed (auth_failed): ")
	if !strings.Contains(strings.ToLower(s.Sentence), "rejected") && !strings.Contains(strings.ToLower(s.Sentence), "auth") {
		t.Errorf("the auth failure does not say the key was refused: %q", s.Sentence)
	}
	screenshot(t, admin.ctx, "t02-auth-failure")
	storyState(t, admin.ctx, "auth failure", "#result-"+authID+" .probe-connection", "Failed (auth_failed): Fake at fake refused the credentials")
	// Reachability failure: the closed port, named.
	s = test(goneID, "Failed (unreachable): ")
	if !strings.Contains(s.Sentence, "127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("the unreachable target is not named: %q", s.Sentence)
	}
	if !strings.Contains(s.Details, "refused") {
		t.Errorf("the Details of the unreachable target do not hold the cause: %q", s.Details)
	}
	screenshot(t, admin.ctx, "t03-unreachable")
	storyState(t, admin.ctx, "reachability failure", "#result-"+goneID+" .probe-connection", "Failed (unreachable): Could not connect to 127.0.0.1:"+strconv.Itoa(port))
	// Unknown host key: said as such, with the fix offered in place.
	s = test(strangerID, "Failed (host_key_unknown): ")
	if has, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[bool](`document.querySelector("#result-`+strangerID+` button.trust-key") !== null`)); !has {
		t.Errorf("the unknown host key's result offers no Trust host key: %q", s.Sentence)
	}

	// Details by keyboard: Tab from the Test button reaches its summary,
	// Enter opens it; Copy copies or selects the text.
	admin.do("focus the Test button", chromedp.Focus(chromedp.CSS(`tr[data-env="`+goneID+`"] button.test`)))
	for range 8 {
		if tag, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.activeElement.tagName`)); tag == "SUMMARY" {
			break
		}
		admin.do("Tab", chromedp.KeyEvent(kb.Tab))
	}
	admin.do("open Details", chromedp.KeyEvent(kb.Enter))
	admin.waitJS(`document.querySelector("#result-` + goneID + ` details.more").open`)
	admin.do("copy", chromedp.Click(chromedp.CSS(`#result-`+goneID+` button.copy`)))
	admin.waitJS(`document.querySelector("#result-` + goneID + ` button.copy").textContent !== "Copy"`)
	screenshot(t, admin.ctx, "t04-details-open")
	admin.do("narrow", chromedp.EmulateViewport(400, 900))
	if w, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`)); len(w) == 2 && w[0] > w[1] {
		t.Errorf("with Details open the page is %d px wide at %d px", w[0], w[1])
	}
	screenshot(t, admin.ctx, "t05-details-open-400")

	// Results that stay (issue 53 item 2): the Test updated each row's
	// state, and a reload shows the same, with the last Test and its time
	// in the Result column: the library stored it.
	type rowState struct{ Badge, Tone, Last, Message, Time string }
	states := func() map[string]rowState {
		t.Helper()
		m, err := chromedp.Run(admin.ctx, chromedp.Evaluate[map[string]rowState](`(function () {
			const m = {};
			document.querySelectorAll("#envs tr[data-env]").forEach(function (tr) {
				const b = tr.querySelector("td.state .badge"), l = tr.querySelector("td.result .last-test");
				const msg = tr.querySelector("td.result .last-message"), tm = l && l.querySelector("time");
				m[tr.dataset.env] = {Badge: b.textContent, Tone: b.className, Last: l ? l.textContent : "",
					Message: msg ? msg.textContent : "", Time: tm ? tm.getAttribute("title") : ""};
			});
			return m;
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	failing := regexp.MustCompile(`^failing since \d\d:\d\d UTC$`)
	check := func(when string, m map[string]rowState, reloaded bool) {
		t.Helper()
		// Availability comes first: the wrong key's Test measured the
		// fake provider (one endpoint for both) and found it refusing,
		// so after a reload both fake rows say unavailable.
		want := map[string]string{okID: "ready — not qualified", authID: "failing"}
		if reloaded {
			want = map[string]string{okID: "unavailable", authID: "unavailable"}
		}
		if got := m[okID]; got.Badge != want[okID] {
			t.Errorf("%s: the passing Test of a tag image: state %q (%s), want %q", when, got.Badge, got.Tone, want[okID])
		}
		if got := m[authID]; reloaded && got.Badge != "unavailable" {
			t.Errorf("%s: the row of the refused key: state %q, want unavailable", when, got.Badge)
		}
		for _, id := range []string{authID, goneID} {
			if id == authID && reloaded {
				continue
			}
			if got := m[id]; !failing.MatchString(got.Badge) || !strings.Contains(got.Tone, "status-bad") {
				t.Errorf("%s: the failed Test of %s: state %q (%s), want \"failing since HH:MM UTC\"", when, id, got.Badge, got.Tone)
			}
		}
		if !reloaded {
			return
		}
		for id, want := range map[string]string{okID: "passed", authID: "failed (auth_failed)", goneID: "failed (unreachable)"} {
			got := m[id]
			if !strings.HasPrefix(got.Last, "Last Test ") || !strings.Contains(got.Last, want) || got.Time == "" || got.Message == "" {
				t.Errorf("%s: the last Test of %s reads %q %q (at %q), want it %s with its time and sentence", when, id, got.Last, got.Message, got.Time, want)
			}
		}
		if got := m[goneID].Message; !strings.Contains(got, "127.0.0.1:"+strconv.Itoa(port)) {
			t.Errorf("%s: the stored sentence of the unreachable target does not name it: %q", when, got)
		}
	}
	check("after the Tests", states(), false)
	admin.do("reload", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(page+"?company=acme"), chromedp.WaitVisible(chromedp.ID("envs")))
	check("after a reload", states(), true)
	screenshot(t, admin.ctx, "t06-results-stay")

	// Unknown host key, with trust (issue 53 item 3): the stored last
	// Test offers "Trust host key…" after the reload; it scans and shows
	// the fingerprint, and saves nothing until "Trust this key".
	sel := "#result-" + strangerID
	admin.do("trust host key", chromedp.Click(chromedp.CSS(sel+` button.trust-key`)))
	admin.waitJS(`document.querySelector("` + sel + ` button.trust-confirm") !== null`)
	shownFP, err := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.querySelector("`+sel+` code.fingerprint").textContent`))
	if err != nil || shownFP != strangerFP {
		t.Errorf("the scan shows the fingerprint %q (%v), want %s", shownFP, err, strangerFP)
	}
	if focus, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.activeElement.textContent`)); focus != "Trust this key" {
		t.Errorf("the focus is on %q after the scan, want the confirmation", focus)
	}
	screenshot(t, admin.ctx, "t07-host-key-scanned")
	storyState(t, admin.ctx, "unknown host key (with trust)", sel+" .last-test", "failed (host_key_unknown)",
		sel+" .trust-panel", "offers the key "+strangerFP+". Compare it with the server's own fingerprint", sel+" .trust-confirm", "Trust this key")
	var before environment.View
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + strangerID, token: tokAdmin}).decode(t, &before)
	if _, ok := before.Config["known_hosts"]; ok || before.Revision != 1 {
		t.Errorf("the scan saved something: revision %d, known_hosts %v", before.Revision, before.Config["known_hosts"])
	}
	admin.do("confirm", chromedp.Click(chromedp.CSS(sel+` button.trust-confirm`)))
	admin.waitJS(`document.querySelector("` + sel + ` .trust-panel").textContent.startsWith("Saved")`)
	said, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.querySelector("`+sel+` .trust-panel").textContent`))
	if !strings.Contains(said, "Saved — revision 2") || !strings.Contains(said, strangerFP) {
		t.Errorf("after Trust this key the row says %q", said)
	}
	var after environment.View
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + strangerID, token: tokAdmin}).decode(t, &after)
	if kh := fmt.Sprint(after.Config["known_hosts"]); after.Revision != 2 || !strings.Contains(kh, "[127.0.0.1]:"+strconv.Itoa(strangerPort)+" ssh-ed25519 ") {
		t.Errorf("after the trust: revision %d, known_hosts %s", after.Revision, kh)
	}
	screenshot(t, admin.ctx, "t08-host-key-trusted")
	// A fingerprint the server does not offer is refused by the API.
	r := e.do(t, call{method: "POST", path: "/api/v1/environments/" + strangerID + "/host-key/trust", token: tokAdmin,
		header: map[string]string{"If-Match": `"2"`}, body: map[string]any{"fingerprint": "SHA256:not-the-key"}})
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), "now offers the key "+strangerFP) {
		t.Errorf("trust with a wrong fingerprint: %d %s", r.status, r.body)
	}

	// Test before saving (issue 53 item 3): the create form's settings
	// as a draft probe, with the wrong key then the right one; the result
	// in the form, nothing saved.
	count := func() int {
		var pg struct{ Items []environment.View }
		e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments", token: tokAdmin}).decode(t, &pg)
		return len(pg.Items)
	}
	n := count()
	draft := func(key, want string) string {
		t.Helper()
		admin.do("draft test", chromedp.SetValue(chromedp.ID("cfg-api_key"), key),
			chromedp.Evaluate[chromedp.Void](`document.getElementById("draft-result").replaceChildren()`),
			chromedp.Click(chromedp.ID("draft-test")))
		admin.waitJS(`document.querySelector("#draft-result details.more") !== null || document.querySelector("#draft-result .sentence") !== null`)
		got, _ := chromedp.Run(admin.ctx, chromedp.Evaluate[string](`document.getElementById("draft-result").textContent`))
		if !strings.HasPrefix(got, want) {
			t.Errorf("Test before saving with key %.8s…: %q, want it to start %q", key, got, want)
		}
		return got
	}
	admin.do("open the fake form", chromedp.Navigate(page+"?company=acme&new=fake"), chromedp.WaitVisible(chromedp.ID("draft-test")),
		chromedp.SendKeys(chromedp.ID("f-name"), "drafted"))
	draft("k-wrong-0123456789", "Failed (auth_failed): ")
	if got := draft(key, "Reached "); !strings.Contains(got, "(not_saved)") {
		t.Errorf("the draft's qualification line does not say nothing was saved: %q", got)
	}
	screenshot(t, admin.ctx, "t09-test-before-saving")
	if got := count(); got != n {
		t.Errorf("Test before saving saved something: %d environments, had %d", got, n)
	}
}

// handshakeServer serves the SSH handshake with a fresh ed25519 host key
// on a loopback port until the test ends (enough for a scan, and for a
// probe to meet an unknown key), and returns the port and the key's
// fingerprint.
func handshakeServer(t *testing.T) (int, string) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &gossh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _, _, _ = gossh.NewServerConn(c, cfg)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, gossh.FingerprintSHA256(signer.PublicKey())
}
