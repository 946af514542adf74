package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The sessions page in a real browser: the administrator (signed in by
// the one-time link) sees every session with its source, revokes the
// board member's from the table, and the board member's next page load is
// signed out; the administrator's own row has no Revoke.
func TestSessionsPageInABrowser(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	link, err := e.s.host.ensureAdmin(context.Background(), time.Now())
	if err != nil || link == "" {
		t.Fatalf("ensureAdmin: %q, %v", link, err)
	}
	text := func(ctx context.Context, sel, what string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: read the page: %v", what, err)
		}
		return s
	}
	bob := browser(t)
	if err := chromedp.Do(bob,
		chromedp.Navigate(e.ts.URL+"/login"),
		chromedp.SendKeys(chromedp.ID("token"), tokBoard),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/api/openapi.json"]`)),
	); err != nil {
		t.Fatalf("bob logs in: %v", err)
	}
	admin := browser(t)
	if err := chromedp.Do(admin,
		chromedp.Navigate(e.ts.URL+"/login?link="+url.QueryEscape(link)),
		chromedp.Navigate(e.ts.URL+sessionsPagePath),
		chromedp.WaitVisible(chromedp.CSS(`#sessions table`)),
	); err != nil {
		t.Fatalf("the admin opens the sessions page: %v", err)
	}
	rows := text(admin, "#sessions tbody", "the sessions table")
	if !strings.Contains(rows, "bob") || !strings.Contains(rows, "board_member") || !strings.Contains(rows, "token") ||
		!strings.Contains(rows, "admin") || !strings.Contains(rows, "link") || !strings.Contains(rows, "this session") {
		t.Errorf("the sessions table: %q", rows)
	}
	screenshot(t, admin, "sessions")
	if err := chromedp.Do(admin,
		chromedp.Click(chromedp.CSS(`tbody tr button.revoke`)), // bob's row: the admin's own has none
		chromedp.WaitVisible(chromedp.CSS(`#sessions-status:not(:empty)`)),
	); err != nil {
		t.Fatalf("revoke bob's session: %v", err)
	}
	if s := text(admin, "#sessions-status", "after the revoke"); s != "Session revoked." {
		t.Errorf("the status after Revoke: %q", s)
	}
	if err := chromedp.Do(bob, chromedp.Navigate(e.ts.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if s := text(bob, "body", "bob after the revoke"); !strings.Contains(s, "Log in") || strings.Contains(s, "Signed in") {
		t.Errorf("bob's page after the admin revoked his session: %q", s)
	}
}
