package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The first start prints a one-time login link (15 minutes, once) that
// lands on the page with a cookie session: HttpOnly, SameSite=Strict,
// server-side and revocable; cookie mutations need the CSRF header.
func TestLoginLinkAndCookieSession(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind, nil)
			ctx := context.Background()
			link, err := e.s.host.ensureAdmin(ctx, time.Now())
			if err != nil || link == "" {
				t.Fatalf("ensureAdmin = %q, %v; want a link", link, err)
			}
			// An expired link is refused.
			if _, err := e.s.host.useLoginLink(ctx, link, time.Now().Add(loginLinkTTL+time.Second)); err == nil {
				t.Error("a login link was accepted after 15 minutes")
			}
			r := e.do(t, call{method: "GET", path: "/login?link=" + url.QueryEscape(link)})
			if r.status != http.StatusSeeOther || r.header.Get("Location") != "/" {
				t.Fatalf("GET /login?link= = %d %q, want a redirect to the page", r.status, r.header.Get("Location"))
			}
			ck := sessionCookieOf(t, r)
			if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure {
				t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, not Secure over plain HTTP", ck)
			}
			if r := e.do(t, call{method: "GET", path: "/login?link=" + url.QueryEscape(link)}); r.status != http.StatusUnauthorized {
				t.Errorf("the link's second use = %d, want 401", r.status)
			}
			// Once used, a restart prints no new link.
			if again, err := e.s.host.ensureAdmin(ctx, time.Now()); err != nil || again != "" {
				t.Errorf("ensureAdmin after a login = %q, %v; want no new link", again, err)
			}
			// A replica on the same database (its migrations already
			// applied) shares the users and sessions.
			_, other, closeOther, err := openStores(ctx, e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if sess, err := other.lookupSession(ctx, ck.Value, time.Now()); err != nil || sess == nil || sess.principal.ID != adminID {
				t.Errorf("the replica reads the session as %+v, %v", sess, err)
			}
			closeOther()
			page := e.must(t, http.StatusOK, call{method: "GET", path: "/", cookie: ck})
			if !strings.Contains(string(page.body), `Signed in as instance_admin &#34;admin&#34;`) {
				t.Errorf("the page does not name the administrator:\n%s", page.body)
			}

			var sv sessionView
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: ck}).decode(t, &sv)
			if sv.Principal.ID != adminID || sv.CSRFToken == "" {
				t.Fatalf("session %+v", sv)
			}
			create := call{method: "POST", path: "/api/v1/environments", cookie: ck, body: map[string]any{"name": "c", "driver": "fake"}}
			if er := e.must(t, http.StatusForbidden, create).err(t); er.Field != csrfHeader {
				t.Errorf("a cookie mutation without CSRF: %+v", er)
			}
			create.header = map[string]string{csrfHeader: sv.CSRFToken}
			e.must(t, http.StatusCreated, create)
			// Logout revokes the session server-side.
			e.must(t, http.StatusNoContent, call{method: "DELETE", path: "/api/v1/session", cookie: ck, header: map[string]string{csrfHeader: sv.CSRFToken}})
			e.must(t, http.StatusUnauthorized, call{method: "GET", path: "/api/v1/session", cookie: ck})

			// A token of the -tokens file is traded for a cookie session at /login.
			res, err := http.PostForm(e.ts.URL+"/login", url.Values{"token": {tokBoard}})
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			var bob *http.Cookie
			for _, c := range res.Request.Response.Cookies() {
				if c.Name == sessionCookie {
					bob = c
				}
			}
			if bob == nil {
				t.Fatal("POST /login with a token set no session cookie")
			}
			e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/session", cookie: bob}).decode(t, &sv)
			if sv.Principal.ID != "bob" || sv.Principal.Role != "board_member" {
				t.Errorf("the token's session is %+v", sv.Principal)
			}
			// No CORS.
			r = e.do(t, call{method: "GET", path: "/api/v1/session", token: tokBoard, header: map[string]string{"Origin": "https://evil.example"}})
			if r.header.Get("Access-Control-Allow-Origin") != "" {
				t.Error("the API answers with CORS headers")
			}
		})
	}
}

func sessionCookieOf(t *testing.T, r *resp) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", sessionCookie, r.header)
	return nil
}

// Over TLS the session cookie is Secure.
func TestSecureCookieOverTLS(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	e.s.tls = true
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := cl.PostForm(e.ts.URL+"/login", url.Values{"token": {tokAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if cs := res.Cookies(); len(cs) != 1 || !cs[0].Secure || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("cookies over TLS: %+v", cs)
	}
	if res, err = cl.PostForm(e.ts.URL+"/login", url.Values{"token": {"not-a-token-0123456789"}}); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
		t.Errorf("an unknown token at /login = %d with cookies %v", res.StatusCode, res.Cookies())
	}
}

// A malformed -tokens file is refused with its line and field.
func TestTokensFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, data, want string }{
		{"syntax", "{\"tokens\": [\n  {\"token\": \"abcdefghijklmnopq\",, }\n]}", "t.json:2"},
		{"role", "{\"tokens\": [\n {\"token\": \"abcdefghijklmnopq\", \"role\": \"instance_admin\", \"id\": \"a\"},\n {\"token\": \"bbcdefghijklmnopq\", \"role\": \"boss\", \"id\": \"b\"}\n]}", "t.json:3: field tokens[1].role"},
		{"short token", "{\"tokens\": [{\"token\": \"x\", \"role\": \"agent\", \"id\": \"a\"}]}", "t.json:1: field tokens[0].token"},
		{"missing id", "{\"tokens\": [\n\n{\"token\": \"abcdefghijklmnopq\", \"role\": \"agent\"}]}", "t.json:3: field tokens[0].id"},
		{"unknown field", "{\"tokens\": [{\"token\": \"abcdefghijklmnopq\", \"role\": \"agent\", \"id\": \"a\", \"colour\": 1}]}", "field colour"},
		{"wrong type", "{\"tokens\": [{\"token\": \"abcdefghijklmnopq\", \"role\": \"agent\", \"id\": \"a\", \"companies\": \"acme\"}]}", "t.json:1: field tokens[0].companies"},
		{"no list", "{}", "field tokens: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseTokens("t.json", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseTokens = %v, want an error naming %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "abcdefghijklmnopq") {
				t.Errorf("the error holds a token: %v", err)
			}
		})
	}
	set, err := parseTokens("t.json", []byte(testTokens))
	if err != nil || len(set) != 5 || set[hashToken(tokAgent)].ID != "agent-7" {
		t.Errorf("parseTokens(good) = %v, %v", set, err)
	}
}

// -listen off loopback is refused without TLS.
func TestListenOffLoopbackNeedsTLS(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{"127.0.0.1:8080": true, "[::1]:80": true, "localhost:1": true, "0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false} {
		if err := checkListen(addr, false); (err == nil) != ok {
			t.Errorf("checkListen(%q, no TLS) = %v", addr, err)
		}
		if err := checkListen(addr, true); err != nil {
			t.Errorf("checkListen(%q, TLS) = %v", addr, err)
		}
	}
	if _, err := parseFlags([]string{"-listen", ":9"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-tls-cert") {
		t.Errorf("parseFlags(-listen :9) = %v", err)
	}
}

// -drivers: the fake only with -test-mode; an unknown name is refused.
func TestDriversFlag(t *testing.T) {
	t.Parallel()
	if d, err := driversNamed([]string{"local", "ssh", "docker", "daytona", "kubernetes"}, false, nil); err != nil || len(d) != 5 {
		t.Errorf("the five real drivers: %d, %v", len(d), err)
	}
	if _, err := driversNamed([]string{"fake"}, false, nil); err == nil || !strings.Contains(err.Error(), "-test-mode") {
		t.Errorf("fake without -test-mode: %v", err)
	}
	if _, err := driversNamed([]string{"nomad"}, true, nil); err == nil || !strings.Contains(err.Error(), `"nomad"`) {
		t.Errorf("an unknown driver: %v", err)
	}
}
