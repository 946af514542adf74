package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/templates"
)

// waitSession polls the session until its state is want.
func (e *tenv) waitSession(t *testing.T, id string, want templates.SessionState) *templates.Session {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ses templates.Session
		e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/setup-sessions/" + id, token: tokOperator}).decode(t, &ses)
		if ses.State == want {
			return &ses
		}
		// captured comes before promoted; the other ends are final.
		if ended := !ses.State.Active() && ses.State != templates.SessionCaptured; ended || time.Now().After(deadline) {
			t.Fatalf("session %s is %s (%s), want %s", id, ses.State, ses.FailureReason, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// UI-4's API: an interactive setup on the fake, its events after a cursor,
// the terminal over WebSocket with a single-use token, capture with
// promote, the drift, the history, revoke; a scripted setup; the roles
// the library decides; the refusals of a driver without the capabilities.
// On both stores (SQLite and PostgreSQL).
func TestTemplateAndSetupAPI(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) { templateAndSetupAPI(t, kind) })
	}
}

func templateAndSetupAPI(t *testing.T, kind string) {
	narrow := fake.New(&fake.Options{Name: "fake-narrow", Undeclared: drivers.NewSet(drivers.CapTemplateCapture, drivers.CapTerminal)})
	e := newEnv(t, kind, &envOpts{drivers: []drivers.Driver{fake.New(nil), narrow}})
	env := e.createFake(t, "imgbox")

	start := call{method: "POST", path: "/api/v1/environments/" + env.ID + "/setup-sessions", token: tokOperator,
		body: map[string]any{"name": "tools", "interactive": true}}
	// Board members and agents do not start setups.
	e.must(t, http.StatusForbidden, call{method: start.method, path: start.path, token: tokBoard, body: start.body})
	var ses templates.Session
	r := e.must(t, http.StatusAccepted, start)
	r.decode(t, &ses)
	if ses.ID == "" || ses.Environment != env.ID || !ses.Interactive || r.header.Get("Location") != "/api/v1/setup-sessions/"+ses.ID {
		t.Fatalf("the started session %+v, Location %q", ses, r.header.Get("Location"))
	}
	// One active session per environment.
	if r := e.must(t, http.StatusConflict, start); !strings.Contains(r.err(t).Message, "active setup session") {
		t.Errorf("a second setup: %s", r.body)
	}
	e.waitSession(t, ses.ID, templates.SessionWaiting)

	// Events after a cursor: all, then nothing new with the same cursor.
	// The session moves to waiting, then stores its "waiting for the
	// operator" event: read until that one is in.
	var evs eventsPage
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		evs = eventsPage{}
		e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/setup-sessions/" + ses.ID + "/events", token: tokBoard}).decode(t, &evs)
		if n := len(evs.Items); n > 0 && strings.HasPrefix(evs.Items[n-1].Message, "waiting for the operator") || time.Now().After(deadline) {
			break
		}
	}
	if len(evs.Items) < 2 || evs.Cursor != evs.Items[len(evs.Items)-1].Seq {
		t.Fatalf("events %+v", evs)
	}
	var more eventsPage
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/setup-sessions/" + ses.ID + "/events?after=" + itoa(uint64(evs.Cursor)), token: tokOperator}).decode(t, &more)
	if len(more.Items) != 0 || more.Cursor != evs.Cursor {
		t.Errorf("events after the last cursor %+v", more)
	}
	if r := e.must(t, http.StatusBadRequest, call{method: "GET", path: "/api/v1/setup-sessions/" + ses.ID + "/events?after=x", token: tokOperator, raw: true}); r.err(t).Field != "after" {
		t.Errorf("a bad cursor: %s", r.body)
	}
	// An agent sees no session at all.
	e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/setup-sessions/" + ses.ID, token: tokAgent})

	// The terminal: a board member mints nothing; the operator's token
	// opens it once, for the operator only.
	mint := call{method: "POST", path: "/api/v1/setup-sessions/" + ses.ID + "/terminal-token", token: tokOperator}
	e.must(t, http.StatusForbidden, call{method: mint.method, path: mint.path, token: tokBoard})
	var tok terminalToken
	e.must(t, http.StatusCreated, mint).decode(t, &tok)
	if tok.Path != terminalPath(ses.ID) || tok.Token == "" {
		t.Fatalf("minted %+v", tok)
	}
	wsURL := "ws" + strings.TrimPrefix(e.ts.URL, "http") + tok.Path + "?token=" + tok.Token
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Another principal's credentials cannot redeem it (and burn nothing
	// it may not: the token is refused before the upgrade).
	if _, res, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tokAdmin}}}); err == nil || res == nil || res.StatusCode < 400 {
		t.Fatalf("the admin redeemed the operator's token: %v", err)
	}
	// Another origin cannot connect (OriginPatterns: the server's own
	// only).
	e.must(t, http.StatusCreated, mint).decode(t, &tok)
	wsURL = "ws" + strings.TrimPrefix(e.ts.URL, "http") + tok.Path + "?token=" + tok.Token
	if _, res, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tokOperator}, "Origin": {"http://evil.example"}}}); err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign origin opened the terminal: %v", err)
	}
	e.must(t, http.StatusCreated, mint).decode(t, &tok)
	wsURL = "ws" + strings.TrimPrefix(e.ts.URL, "http") + tok.Path + "?token=" + tok.Token
	opHdr := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tokOperator}}}
	c, _, err := websocket.Dial(ctx, wsURL, opHdr)
	if err != nil {
		t.Fatalf("the terminal: %v", err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("echo hello-term\n")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "hello-term\r\n") {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading the terminal (so far %q): %v", out.String(), err)
		}
		if typ == websocket.MessageBinary {
			out.Write(b)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	if _, res, err := websocket.Dial(ctx, wsURL, opHdr); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a used token redeemed again: %v", err)
	}

	// No token in the server's log.
	if strings.Contains(e.logs.String(), tok.Token) {
		t.Error("the terminal token is in the server's log")
	}

	// Capture with promote: the template is active and relinked.
	e.must(t, http.StatusForbidden, call{method: "POST", path: "/api/v1/setup-sessions/" + ses.ID + "/capture", token: tokBoard, body: map[string]any{"promote": true}})
	var captured templates.Session
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/setup-sessions/" + ses.ID + "/capture", token: tokOperator, body: map[string]any{"promote": true}}).decode(t, &captured)
	if captured.State != templates.SessionPromoted || captured.Template == "" {
		t.Fatalf("captured %+v", captured)
	}
	var tl items[templates.Template]
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + env.ID + "/templates", token: tokBoard}).decode(t, &tl)
	if len(tl.Items) != 1 || tl.Items[0].ID != captured.Template || tl.Items[0].State != templates.StateActive || !tl.Items[0].Redacted || tl.Items[0].Identity != "" {
		t.Fatalf("the board's templates %+v", tl.Items)
	}
	var v environment.View
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + env.ID, token: tokAdmin}).decode(t, &v)
	if v.ActiveTemplate == nil || v.ActiveTemplate.ID != captured.Template || v.ActiveTemplate.Drift != environment.DriftRelinked {
		t.Fatalf("the environment's active template %+v", v.ActiveTemplate)
	}
	var hist items[templates.Event]
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + env.ID + "/template-history", token: tokOperator}).decode(t, &hist)
	if len(hist.Items) != 1 || hist.Items[0].Action != "promote" || hist.Items[0].To != captured.Template || hist.Items[0].Actor == "" {
		t.Fatalf("history %+v", hist.Items)
	}
	// Promoting the active one again is a conflict; rollback of a
	// template that is not superseded too.
	e.must(t, http.StatusConflict, call{method: "POST", path: "/api/v1/templates/" + captured.Template + "/rollback", token: tokOperator})

	// A scripted setup with promote, in the background: a second
	// template supersedes the first, which rolls back.
	script := map[string]any{"steps": []any{map[string]any{"write": map[string]any{"path": "/etc/motd", "content": "hi\n"}}}}
	var s2 templates.Session
	e.must(t, http.StatusAccepted, call{method: "POST", path: start.path, token: tokOperator, body: map[string]any{"script": script, "promote": true}}).decode(t, &s2)
	s2p := e.waitSession(t, s2.ID, templates.SessionPromoted)
	var back templates.Template
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/templates/" + captured.Template + "/rollback", token: tokOperator}).decode(t, &back)
	if back.State != templates.StateActive {
		t.Errorf("rolled back %+v", back)
	}
	// A script with an unknown key is refused naming the step.
	bad := map[string]any{"steps": []any{map[string]any{"runn": []string{"true"}}}}
	if r := e.must(t, http.StatusBadRequest, call{method: "POST", path: start.path, token: tokOperator, body: map[string]any{"script": bad}}); !strings.Contains(r.err(t).Message, "step 1") {
		t.Errorf("an unknown script key: %s", r.body)
	}
	// Revoke the active template: the pointer is cleared.
	var rev templates.Template
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/templates/" + captured.Template + "/revoke", token: tokOperator, body: map[string]any{"reason": "test"}}).decode(t, &rev)
	if rev.State != templates.StateRevoked {
		t.Errorf("revoked %+v", rev)
	}
	var after environment.View // fresh: decoding leaves absent fields as they were
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + env.ID, token: tokAdmin}).decode(t, &after)
	if after.ActiveTemplate != nil {
		t.Errorf("after the revoke the active template is %+v", after.ActiveTemplate)
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/environments/" + env.ID + "/template-history", token: tokOperator}).decode(t, &hist)
	if len(hist.Items) != 4 || hist.Items[1].To != s2p.Template || hist.Items[2].Action != "rollback" || hist.Items[3].Action != "revoke" {
		t.Errorf("history %+v", hist.Items)
	}

	// An interactive session cancelled.
	var s3 templates.Session
	e.must(t, http.StatusAccepted, start).decode(t, &s3)
	e.waitSession(t, s3.ID, templates.SessionWaiting)
	var cancelled templates.Session
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/setup-sessions/" + s3.ID + "/cancel", token: tokOperator}).decode(t, &cancelled)
	if cancelled.State != templates.SessionCancelled {
		t.Errorf("cancelled %+v", cancelled)
	}
	var sl items[templates.Session]
	e.must(t, http.StatusOK, call{method: "GET", path: start.path, token: tokBoard}).decode(t, &sl)
	if len(sl.Items) != 3 {
		t.Errorf("sessions %d, want 3", len(sl.Items))
	}

	// A driver without template_capture (and terminal): both refused
	// naming the capability, nothing started.
	var nv environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": "narrowbox", "driver": "fake-narrow"}}).decode(t, &nv)
	for _, body := range []map[string]any{{"interactive": true}, {"script": script}} {
		r := e.must(t, http.StatusUnprocessableEntity, call{method: "POST", path: "/api/v1/environments/" + nv.ID + "/setup-sessions", token: tokOperator, body: body})
		if !strings.Contains(r.err(t).Message, "template_capture") {
			t.Errorf("setup on fake-narrow %v: %s", body, r.body)
		}
	}
}

// /xterm/ serves the bundle and the style sheet of the configured
// node-xterm directory, nothing else, and nothing without one.
func TestXTermServed(t *testing.T) {
	get := func(e *tenv, path string) (int, string) {
		t.Helper()
		res, err := http.Get(e.ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, res.Body); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b.String()
	}
	plain := newEnv(t, "sqlite", nil)
	if st, _ := get(plain, "/xterm/xterm.js"); st != http.StatusNotFound {
		t.Errorf("without xterm /xterm/xterm.js is %d", st)
	}
	dir := defaultXTermDir()
	if dir == "" {
		testenv.Missing(t, "node-xterm", "apt-get install libjs-xterm node-xterm", nil)
	}
	e := newEnv(t, "sqlite", &envOpts{xtermDir: dir})
	if st, body := get(e, "/xterm/xterm.js"); st != http.StatusOK || !strings.Contains(body, `window.Terminal = load("public/Terminal").Terminal;`) || !strings.Contains(body, `defs["public/Terminal"]`) {
		t.Errorf("/xterm/xterm.js: %d, %d bytes", st, len(body))
	}
	if st, body := get(e, "/xterm/xterm.css"); st != http.StatusOK || !strings.Contains(body, ".xterm") {
		t.Errorf("/xterm/xterm.css: %d", st)
	}
	for _, p := range []string{"/xterm/Terminal.js", "/xterm/..%2fpackage.json", "/xterm/"} {
		if st, _ := get(e, p); st != http.StatusNotFound {
			t.Errorf("%s is %d, want 404", p, st)
		}
	}
}
