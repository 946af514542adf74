package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// storybookStates are the Storybook states of the Environments page that
// issue 53 asks a browser check of, each named as the issue names it. A
// test that reaches one calls storyState there; docs/server.md lists
// which test shows which.
var storybookStates = []string{
	"local editor",
	"SSH editor",
	"Docker editor",
	"Daytona editor",
	"unavailable provider (settings-driven)",
	"unavailable provider (engine down)",
	"missing credentials",
	"save pending",
	"save error (stale revision)",
	"save success",
	"restricted operator (board member)",
	"agent",
	"supported vs unavailable capabilities",
	"interactive-setup and template-capture limits",
	"Test pending",
	"Test success",
	"reachability failure",
	"auth failure",
	"unknown host key (with trust)",
	"qualification absent",
	"qualification invalidated (what and when)",
	"scripted setup",
	"capture and promote",
	"setup progress",
	"terminal connect",
	"terminal disconnect and reconnect",
	"terminal failure (with its reason)",
	"unsupported capability",
	"active-image drift",
}

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

// storyState checks the Storybook state named state where the calling
// test has brought the page (ctx, one browser tab the test shares): a
// subtest "state NN <state>" asserts what the operator reads (reads are
// pairs of a CSS selector and a text its element must contain), and
// keeps screenshots "state-NN-<slug>-1280" and "-400", the viewport put
// back after. It opens no browser of its own.
func storyState(t *testing.T, ctx context.Context, state string, reads ...string) {
	t.Helper()
	n := slices.Index(storybookStates, state)
	if n < 0 || len(reads)%2 != 0 {
		t.Fatalf("storyState(%q, %d reads): not a state of storybookStates, or a selector without its text", state, len(reads))
	}
	name := fmt.Sprintf("state-%02d-%s", n+1, strings.Trim(slugRE.ReplaceAllString(strings.ToLower(state), "-"), "-"))
	t.Run(fmt.Sprintf("state %02d %s", n+1, state), func(t *testing.T) {
		for i := 0; i < len(reads); i += 2 {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(function () {
				const el = document.querySelector(%q);
				return el ? el.textContent.replace(/\s+/g, " ").trim() : "(no element)";
			})()`, reads[i])))
			if err != nil || !strings.Contains(got, reads[i+1]) {
				t.Errorf("%s: %s reads %q (%v), want it to contain %q", state, reads[i], got, err, reads[i+1])
			}
		}
		size, err := chromedp.Run(ctx, chromedp.Evaluate[[]int64](`[innerWidth, innerHeight]`))
		if err != nil || len(size) != 2 {
			t.Fatalf("%s: the viewport: %v", state, err)
		}
		for _, w := range []int64{1280, 400} {
			if _, err := chromedp.Run(ctx, chromedp.EmulateViewport(w, size[1])); err != nil {
				t.Fatal(err)
			}
			screenshot(t, ctx, name+"-"+itoa(uint64(w)))
		}
		if _, err := chromedp.Run(ctx, chromedp.EmulateViewport(size[0], size[1])); err != nil {
			t.Fatal(err)
		}
	})
}
