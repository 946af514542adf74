package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/syncbuf"
)

// The whole command: the first start prints a one-time login link on
// stderr that lands on the page; the log holds request lines with id,
// status and duration, and never a token, cookie or link; SIGTERM (ctx)
// shuts down cleanly; a second start prints no new link once it was used.
func TestServerCommand(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokFile, []byte(testTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() (stderr *syncbuf.Buffer, addr string, stop func()) {
		stderr = &syncbuf.Buffer{}
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		errc := make(chan error, 1)
		go func() {
			errc <- run(ctx, []string{"-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data"), "-drivers", "local,fake", "-test-mode", "-tokens", tokFile}, stderr, ready)
		}()
		select {
		case addr = <-ready:
		case err := <-errc:
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
		return stderr, addr, func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("run after SIGTERM: %v\n%s", err, stderr.String())
			}
		}
	}
	stderr, addr, stop := start()
	m := regexp.MustCompile(`(http://\S+/login\?link=(\S+))`).FindStringSubmatch(stderr.String())
	if m == nil {
		stop()
		t.Fatalf("no login link on stderr:\n%s", stderr.String())
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := cl.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var ck *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			ck = c
		}
	}
	if res.StatusCode != http.StatusSeeOther || ck == nil {
		t.Fatalf("the login link answered %d without a session", res.StatusCode)
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/v1/environments", nil)
	req.AddCookie(ck)
	res, err = cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET environments with the session = %d", res.StatusCode)
	}
	req, _ = http.NewRequest("GET", "http://"+addr+"/api/v1/drivers", nil)
	req.Header.Set("Authorization", "Bearer "+tokAgent)
	if res, err = cl.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	stop()
	logs := stderr.String()
	after := logs[strings.Index(logs, m[1])+len(m[1]):]
	for _, secret := range []string{m[2], url.QueryEscape(m[2]), ck.Value, tokAgent, tokAdmin} {
		if strings.Contains(after, secret) {
			t.Errorf("the log holds a secret (token, cookie or link) %.8s…", secret)
		}
	}
	if !regexp.MustCompile(`msg=request id=[0-9a-f]{16} method=GET path=/api/v1/environments status=200 duration=\S+`).MatchString(logs) {
		t.Errorf("no request line with id, status and duration:\n%s", logs)
	}
	if !strings.Contains(logs, "action=login") {
		t.Errorf("no audit line for the login:\n%s", logs)
	}
	// The second start: the link was used, so no new one.
	stderr, _, stop = start()
	stop()
	if strings.Contains(stderr.String(), "login?link=") {
		t.Errorf("a second start printed a login link again:\n%s", stderr.String())
	}
}
