package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/internal/testenv"
)

// headlessShell is Debian's chromium-headless-shell, launched directly
// (its wrapper script leaves processes behind).
const headlessShell = "/usr/lib/chromium/chromium-headless-shell"

// browser returns a chromedp context on a fresh headless browser, ended
// with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(headlessShell); err != nil {
		testenv.Missing(t, "chromium-headless-shell", "apt-get install chromium-headless-shell", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(headlessShell),
		chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", headlessShell, err)
	}
	return ctx
}

// screenshot saves the page as PNG in BERTH_SCREENSHOTS (if set), for a
// person to look at.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("BERTH_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The server's pages in a real browser, every state they have: signed out
// (a link to log in), the login form traded for a cookie session with a
// token of the -tokens file, the one-time login link that signs the
// administrator in and lands on the page, the link refused when used
// again, and a session cookie that page scripts cannot read (HttpOnly).
func TestPagesInABrowser(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	link, err := e.s.host.ensureAdmin(context.Background(), time.Now())
	if err != nil || link == "" {
		t.Fatalf("ensureAdmin: %q, %v", link, err)
	}
	text := func(ctx context.Context, what string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		if err != nil {
			t.Fatalf("%s: read the page: %v", what, err)
		}
		return s
	}

	// Signed out, then the form with a board member's token.
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(e.ts.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if s := text(ctx, "signed out"); !strings.Contains(s, "Log in") || strings.Contains(s, "Signed in") {
		t.Errorf("the page signed out: %q", s)
	}
	screenshot(t, ctx, "signed-out")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[href="/login"]`)),
		chromedp.WaitVisible(chromedp.ID("token")),
	); err != nil {
		t.Fatalf("open the login form: %v", err)
	}
	screenshot(t, ctx, "login-form")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), tokBoard),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/api/openapi.json"]`)),
	); err != nil {
		t.Fatalf("log in with a token: %v", err)
	}
	if s := text(ctx, "after the form"); !strings.Contains(s, `Signed in as board_member "bob"`) {
		t.Errorf("the page after logging in with the board member's token: %q", s)
	}
	if cookies, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); err != nil || cookies != "" {
		t.Errorf("page scripts read the cookies %q (%v), want none (HttpOnly)", cookies, err)
	}
	screenshot(t, ctx, "signed-in-token")

	// The one-time link, in another browser: signed in as the
	// administrator; used again, it is refused.
	admin := browser(t)
	if err := chromedp.Do(admin, chromedp.Navigate(e.ts.URL+"/login?link="+link)); err != nil {
		t.Fatal(err)
	}
	if s := text(admin, "the login link"); !strings.Contains(s, `Signed in as instance_admin "admin"`) {
		t.Errorf("the page after the login link: %q", s)
	}
	screenshot(t, admin, "signed-in-link")
	again := browser(t)
	if err := chromedp.Do(again, chromedp.Navigate(e.ts.URL+"/login?link="+link)); err != nil {
		t.Fatal(err)
	}
	if s := text(again, "the login link again"); !strings.Contains(s, "auth_failed") || strings.Contains(s, "Signed in") {
		t.Errorf("the login link used a second time: %q", s)
	}
	screenshot(t, again, "link-used-again")
}
