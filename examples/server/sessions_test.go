package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
)

// loginWithToken trades a bearer token for a cookie session at /login
// (as the login form does) and returns the cookie and the CSRF token.
func (e *tenv) loginWithToken(t testing.TB, tok string) (*http.Cookie, string) {
	t.Helper()
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := cl.PostForm(e.ts.URL+"/login", url.Values{"token": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /login = %d, want 303", res.StatusCode)
	}
	var ck *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			ck = c
		}
	}
	if ck == nil {
		t.Fatal("POST /login set no session cookie")
	}
	var sv sessionView
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: ck}).decode(t, &sv)
	return ck, sv.CSRFToken
}

// restart starts another server on e's database with the -tokens file
// tokens (as a restart, or a replica, would) and returns it.
func (e *tenv) restart(t testing.TB, tokens string) *tenv {
	t.Helper()
	set, err := parseTokens("tokens.json", []byte(tokens))
	if err != nil {
		t.Fatal(err)
	}
	return e.restartOpts(t, set, 4, limits{})
}

// restartOpts starts another server on e's database with the token set
// set, maxStreams stream slots and lim, and drvs as its drivers (the fake
// when none).
func (e *tenv) restartOpts(t testing.TB, set tokenSet, maxStreams int, lim limits, drvs ...drivers.Driver) *tenv {
	t.Helper()
	o := &tenv{t: t, logs: e.logs, dir: t.TempDir(), dsn: e.dsn}
	ctx := context.Background()
	st, host, closeDB, err := openStores(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := runnerSpecOf(testenv.FakeRunnerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := secretfile.Open(ctx, filepath.Join(o.dir, "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	if len(drvs) == 0 {
		drvs = []drivers.Driver{fake.New(nil)}
	}
	o.s, err = newServer(ctx, options{stores: st, host: host, drivers: drvs, testMode: true, tokens: set,
		log: slog.New(slog.NewTextHandler(e.logs, nil)), runnerSet: drivers.RunnerSetOf(spec), maxStreams: maxStreams, secrets: secrets, limits: lim})
	if err != nil {
		closeDB()
		t.Fatal(err)
	}
	o.ts = httptest.NewServer(o.s.Handler())
	t.Cleanup(func() {
		o.ts.Close()
		if err := o.close(); err != nil {
			t.Errorf("server Close: %v", err)
		}
		closeDB()
	})
	o.router = docRouter(t)
	return o
}

// withoutToken returns testTokens without the entry of tok.
func withoutToken(tok string) string {
	var entries []string
	for _, l := range strings.Split(testTokens, "\n") {
		if strings.HasPrefix(l, "  {") && !strings.Contains(l, `"`+tok+`"`) {
			entries = append(entries, strings.TrimSuffix(l, ","))
		}
	}
	return "{\"tokens\": [\n" + strings.Join(entries, ",\n") + "\n]}"
}

// A session follows the token it was traded for: once the token is
// removed from -tokens (and the server restarted, or a replica reads the
// new file), the session is refused with 401 and deleted; a session whose
// token now grants other companies is refused too.
func TestSessionEndsWhenItsTokenIsRemovedOrChanged(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, nil)
			op, opCSRF := e.loginWithToken(t, tokOperator)
			board, _ := e.loginWithToken(t, tokBoard)
			create := call{method: "POST", path: "/api/v1/environments", cookie: op, header: map[string]string{csrfHeader: opCSRF},
				body: map[string]any{"name": "before", "driver": "fake"}}
			e.must(t, http.StatusCreated, create)

			// The operator's token is removed and bob's now grants globex.
			tokens := strings.Replace(withoutToken(tokOperator), `"id": "bob", "companies": ["acme"]`, `"id": "bob", "companies": ["globex"]`, 1)
			r := e.restart(t, tokens)
			create.body = map[string]any{"name": "after", "driver": "fake"}
			if got := r.do(t, create); got.status != http.StatusUnauthorized {
				t.Fatalf("a removed operator's session created an environment: %d %s", got.status, got.body)
			}
			// The admin's list leaves out (and deletes) bob's session too.
			var list struct {
				Items []sessionInfo `json:"items"`
			}
			r.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/sessions", token: tokAdmin}).decode(t, &list)
			if len(list.Items) != 0 {
				t.Errorf("sessions listed after their tokens went or changed: %+v", list.Items)
			}
			r.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/session", cookie: board})
			var n int
			if err := r.s.host.db.QueryRow(`SELECT COUNT(*) FROM server_sessions`).Scan(&n); err != nil || n != 0 {
				t.Errorf("sessions left after their tokens went: %d, %v", n, err)
			}
		})
	}
}

// A session unused for the idle timeout (30 min) is refused and deleted,
// though its 12 h cap is far.
func TestIdleSessionEnds(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	ck, _ := e.loginWithToken(t, tokBoard)
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: ck})
	if _, err := e.s.host.db.Exec(`UPDATE server_sessions SET last_seen = last_seen - ?, created_at = created_at - ?`,
		int64((defaultSessionIdle + time.Minute).Seconds()), int64((defaultSessionIdle + time.Minute).Seconds())); err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/session", cookie: ck})
	// A session in use stays: last seen is renewed.
	ck2, _ := e.loginWithToken(t, tokBoard)
	if _, err := e.s.host.db.Exec(`UPDATE server_sessions SET last_seen = last_seen - ?`, int64((defaultSessionIdle - time.Minute).Seconds())); err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: ck2})
	var seen, created int64
	if err := e.s.host.db.QueryRow(`SELECT last_seen, created_at FROM server_sessions`).Scan(&seen, &created); err != nil || seen < created {
		t.Errorf("last seen %d not renewed past created %d: %v", seen, created, err)
	}
}

// The -tokens file is read again when it changes and on SIGHUP (reload):
// a token removed from it is refused at once, bearer and session alike,
// without a restart; a broken file keeps the previous tokens and never
// shows a token in the log.
func TestTokensFileReadAgainWhenChanged(t *testing.T) {
	e := newEnv(t, "sqlite", &envOpts{tokensFile: testTokens})
	path := filepath.Join(e.dir, "tokens.json")
	ck, _ := e.loginWithToken(t, tokAgent)
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", token: tokAgent})
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: ck})

	broken := `{"tokens": [{"token": "` + tokAgent + `", "role": "agent", "id": "agent-7", "companies": ["acme"], "` + tokAdmin + `": 1}]}`
	if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", token: tokOperator}) // kept
	if strings.Contains(e.logs.String(), tokAdmin) || !strings.Contains(e.logs.String(), "tokens file not read") {
		t.Errorf("a broken tokens file: the log shows a token or no error:\n%s", e.logs.String())
	}

	if err := os.WriteFile(path, []byte(withoutToken(tokAgent)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/session", token: tokAgent})
	e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/session", cookie: ck})
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", token: tokBoard})

	// SIGHUP's reload reads the file even when its time and size did not
	// change (a copy with the same size over it within a clock tick).
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	again := withoutToken(tokBoard)
	again += strings.Repeat(" ", int(fi.Size())-len(again))
	if len(again) != int(fi.Size()) {
		t.Fatalf("test setup: sizes %d and %d", len(again), fi.Size())
	}
	if err := os.WriteFile(path, []byte(again), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, fi.ModTime(), fi.ModTime())
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", token: tokBoard}) // unchanged on disk, as far as stat tells
	if err := e.s.tokens.reload(); err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/session", token: tokBoard})
}

// A malformed -tokens file never echoes a token in its error: neither a
// file keyed by its tokens ({"TOKEN": {…}}) nor an entry with a token as
// an unknown field's name.
func TestMalformedTokensFileNeverEchoesAToken(t *testing.T) {
	t.Parallel()
	const tok = "tok_0123456789abcdefghij"
	for name, data := range map[string]string{
		"keyed by token": `{"` + tok + `": {"role": "agent", "id": "a"}}`,
		"after the list": `{"tokens": [], "` + tok + `": {"role": "agent"}}`,
		"entry field":    `{"tokens": [{"token": "abcdefghijklmnopq", "role": "agent", "id": "a", "` + tok + `": true}]}`,
	} {
		_, err := parseTokens("t.json", []byte(data))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), "abcdefghijklmnopq") {
			t.Errorf("%s: the error shows a token: %v", name, err)
		}
		if !strings.Contains(err.Error(), "t.json:1") {
			t.Errorf("%s: the error names no line: %v", name, err)
		}
	}
}

// One (role, id) has one grant: a tokens file that gives it two different
// sets of companies is refused at start-up, naming both lines and no
// token; the same grant under two tokens (a rotation) is fine.
func TestTokensFileRefusesTwoGrantsForOneIdentity(t *testing.T) {
	t.Parallel()
	two := "{\"tokens\": [\n" +
		"  {\"token\": \"ci-acme-token-0123456789\", \"role\": \"agent\", \"id\": \"ci\", \"companies\": [\"acme\"]},\n" +
		"  {\"token\": \"board-token-0123456789ab\", \"role\": \"board_member\", \"id\": \"ci\", \"companies\": [\"globex\"]},\n" +
		"  {\"token\": \"ci-globex-token-0123456789\", \"role\": \"agent\", \"id\": \"ci\", \"companies\": [\"globex\"]}\n]}"
	_, err := parseTokens("t.json", []byte(two))
	if err == nil || !strings.Contains(err.Error(), "t.json:2") || !strings.Contains(err.Error(), "t.json:4") || !strings.Contains(err.Error(), `"ci"`) {
		t.Errorf("two grants of agent ci: %v, want an error naming lines 2 and 4", err)
	}
	if err != nil && strings.Contains(err.Error(), "-token-0123456789") {
		t.Errorf("the error shows a token: %v", err)
	}
	rotated := `{"tokens": [
  {"token": "ci-old-token-0123456789", "role": "agent", "id": "ci", "companies": ["acme", "globex"]},
  {"token": "ci-new-token-0123456789", "role": "agent", "id": "ci", "companies": ["globex", "acme"]}]}`
	if set, err := parseTokens("t.json", []byte(rotated)); err != nil || len(set) != 2 {
		t.Errorf("one grant under two tokens: %v, %v", set, err)
	}
}

// An instance admin lists the sessions (who, role, companies, created,
// last seen, source) and revokes any; the revoked one is 401 at once;
// nobody else may list or revoke.
func TestAdminListsAndRevokesSessions(t *testing.T) {
	e := newEnv(t, "postgres", nil)
	link, err := e.s.host.ensureAdmin(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin := sessionCookieOf(t, e.do(t, call{method: "GET", path: "/login?link=" + url.QueryEscape(link)}))
	bob, _ := e.loginWithToken(t, tokBoard)
	var list struct {
		Items []sessionInfo `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/sessions", cookie: admin}).decode(t, &list)
	if len(list.Items) != 2 {
		t.Fatalf("sessions %+v, want the admin's and bob's", list.Items)
	}
	var bobID string
	for _, it := range list.Items {
		switch it.Principal.ID {
		case "bob":
			bobID = it.ID
			if it.Source != "token" || it.Principal.Role != "board_member" || strings.Join(it.Principal.Companies, ",") != "acme" || it.Current ||
				it.CreatedAt.IsZero() || it.LastSeenAt.IsZero() {
				t.Errorf("bob's session %+v", it)
			}
		case adminID:
			if it.Source != "link" || !it.Current {
				t.Errorf("the admin's session %+v", it)
			}
		default:
			t.Errorf("a session of %+v", it.Principal)
		}
	}
	if strings.Contains(string(e.bodies), bob.Value) || strings.Contains(string(e.bodies), hashToken(bob.Value)) {
		t.Error("the list shows a session's cookie or its hash")
	}
	e.must(t, http.StatusForbidden, call{method: "GET", path: "/api/v1/sessions", cookie: bob})
	e.must(t, http.StatusForbidden, call{method: "GET", path: "/api/v1/sessions", token: tokOperator})
	e.must(t, http.StatusForbidden, call{method: "DELETE", path: "/api/v1/sessions/" + bobID, token: tokBoard})
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: bob})
	e.must(t, http.StatusNoContent, call{method: "DELETE", path: "/api/v1/sessions/" + bobID, token: tokAdmin})
	e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/session", cookie: bob})
	e.must(t, http.StatusNotFound, call{method: "DELETE", path: "/api/v1/sessions/" + bobID, token: tokAdmin})
	// The page lists them for the admin.
	page := e.must(t, http.StatusOK, call{method: "GET", path: sessionsPagePath, cookie: admin})
	if !strings.Contains(string(page.body), `>instance_admin</td>`) || !strings.Contains(string(page.body), `>link</td>`) {
		t.Errorf("the sessions page:\n%s", page.body)
	}
	e.must(t, http.StatusForbidden, call{method: "GET", path: sessionsPagePath, cookie: sessionCookieOf(t, e.loginResp(t, tokBoard))})
}

// loginResp posts tok to /login and returns the response.
func (e *tenv) loginResp(t testing.TB, tok string) *resp {
	t.Helper()
	return e.do(t, call{method: "POST", path: "/login", body: "token=" + url.QueryEscape(tok),
		header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
}

// `server login-link -data DIR` prints a fresh one-time link after the
// first login (a lost cookie no longer needs a token and a restart); the
// link signs the administrator in once.
func TestLoginLinkCommandPrintsAFreshLink(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	link, err := e.s.host.ensureAdmin(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusSeeOther, call{method: "GET", path: "/login?link=" + url.QueryEscape(link)})
	if again, _ := e.s.host.ensureAdmin(context.Background(), time.Now()); again != "" {
		t.Fatal("a start after the first login printed a link")
	}
	var out, errb bytes.Buffer
	if err := loginLinkCommand(context.Background(), []string{"-data", e.dir}, &out, &errb); err != nil {
		t.Fatalf("login-link: %v\n%s", err, errb.String())
	}
	line := strings.TrimSpace(out.String())
	fresh, ok := strings.CutPrefix(line, "http://127.0.0.1:8080/login?link=")
	if !ok || fresh == "" || fresh == link {
		t.Fatalf("login-link printed %q", line)
	}
	r := e.must(t, http.StatusSeeOther, call{method: "GET", path: "/login?link=" + fresh})
	var sv sessionView
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: sessionCookieOf(t, r)}).decode(t, &sv)
	if sv.Principal.ID != adminID {
		t.Errorf("the fresh link signed in %+v", sv.Principal)
	}
	e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/login?link=" + fresh})
	if err := loginLinkCommand(context.Background(), []string{"-data", filepath.Join(e.dir, "nothing")}, &out, &errb); err == nil {
		t.Error("login-link on a directory without a database made one")
	}
}

// The whole command reads the -tokens file again on SIGHUP: a token
// removed from a file whose size and modification time did not change
// (as stat sees it) is refused once the signal arrived, without a
// restart.
func TestServerCommandReadsTheTokensFileOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokFile, []byte(testTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data"), "-drivers", "fake", "-test-mode", "-tokens", tokFile}, stderr, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-errc:
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run after SIGTERM: %v", err)
		}
	}()
	status := func() int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/v1/session", nil)
		req.Header.Set("Authorization", "Bearer "+tokBoard)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := status(); st != http.StatusOK {
		t.Fatalf("bob's token before = %d", st)
	}
	fi, err := os.Stat(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	without := withoutToken(tokBoard)
	without += strings.Repeat(" ", int(fi.Size())-len(without))
	if err := os.WriteFile(tokFile, []byte(without), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tokFile, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if st := status(); st != http.StatusOK {
		t.Fatalf("bob's token before SIGHUP = %d (the file looks unchanged to stat)", st)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal arrives asynchronously: wait for it (the bound only
	// keeps a lost signal from hanging the test).
	deadline := time.Now().Add(time.Minute)
	for status() != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatalf("bob's token still works after SIGHUP:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
