package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	return startBrowser(t, time.Minute)
}

// startBrowser starts a headless browser whose first tab's context ends
// after timeout or with the test. After the test, it checks that the
// browser and every process it started are gone.
func startBrowser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	if _, err := os.Stat(headlessShell); err != nil {
		testenv.Missing(t, "chromium-headless-shell", "apt-get install chromium-headless-shell", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(headlessShell),
		chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	var browserPID int
	t.Cleanup(func() {
		pids := []int{}
		if browserPID != 0 {
			pids = append(append(pids, browserPID), descendants(browserPID)...)
		}
		cancelTimeout()
		cancel()
		cancelAlloc()
		t.Logf("checking that the browser's %d processes end", len(pids))
		// The browser and its helpers (renderers, GPU, zygote) are gone.
		deadline := time.Now().Add(10 * time.Second)
		for _, pid := range pids {
			for alive(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if alive(pid) {
				t.Errorf("browser process %d is still running after the test", pid)
			}
		}
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", headlessShell, err)
	}
	if p := chromedp.FromContext(ctx).Browser.Process(); p != nil {
		browserPID = p.Pid
	} else {
		t.Fatal("no browser process")
	}
	return ctx
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// descendants lists the processes under pid now.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			parent[n] = pp
		}
	}
	var out []int
	for n := range parent {
		for p := parent[n]; p != 0; p = parent[p] {
			if p == pid {
				out = append(out, n)
				break
			}
			if _, ok := parent[p]; !ok {
				break
			}
		}
	}
	return out
}

// screenshot saves the page as PNG in BERTH_SCREENSHOTS if set, else in
// the test's artifact directory, for a person to look at.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("BERTH_SCREENSHOTS")
	if dir == "" {
		dir = t.ArtifactDir()
	}
	// A capture beyond the viewport lays the page out at its full size
	// and back, and may leave it scrolled elsewhere, to snap back at the
	// next input: a click then is pressed at one position and released at
	// another, and lost. So the capture scrolls the page back to where it
	// was and waits until it stays there for a few looks (at most 5 s).
	at, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64]("[scrollX, scrollY]"))
	if err != nil || len(at) != 2 {
		t.Fatalf("screenshot %s: the scroll position: %v", name, err)
	}
	checkPageJargon(t, ctx, name)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	back := fmt.Sprintf(`new Promise(function (done) {
		const until = performance.now() + 5000;
		let same = 0;
		(function look() {
			if (scrollX === %[1]v && scrollY === %[2]v) same++;
			else { same = 0; scrollTo(%[1]v, %[2]v); }
			if (same >= 3 || performance.now() > until) done(same >= 3 ? "" : scrollX + "," + scrollY);
			else setTimeout(look, 20);
		})();
	})`, at[0], at[1])
	if off, err := chromedp.Run(ctx, chromedp.Evaluate[string](back, chromedp.EvalAwaitPromise)); err != nil || off != "" {
		t.Logf("screenshot %s: the page did not scroll back to %v within 5 s: at %s (%v)", name, at, off, err)
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
