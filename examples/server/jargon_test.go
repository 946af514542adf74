package main

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
)

var (
	// requirementID and goName are what a text for an operator never
	// holds (issue 53, Must hold 2): a requirement ID of SPEC, and a Go
	// selector such as probe.Result.
	requirementID = regexp.MustCompile(`(CFG|CAP|PRB|QUAL|IMG|LEASE|ASG|PRP|AUTH|UI|WS|ISO|PLG|SCALE)-[0-9]+`)
	goName        = regexp.MustCompile(`\b[a-z]+\.[A-Z]\w+`)
	// camelWord is a word in mixed case (ScanHostKey, APIKey): jargon
	// when it is an exported name recorded in api/.
	camelWord = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*\b|\b[A-Z]{2,}[a-z][A-Za-z0-9]*\b`)
)

var apiNames = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	files, _ := filepath.Glob("../../api/*.txt")
	word := regexp.MustCompile(`, (?:func|type|const|var) (?:\([^)]*\) )?([A-Z]\w*)|, method \([^)]*\) ([A-Z]\w*)`)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			for _, m := range word.FindAllStringSubmatch(sc.Text(), -1) {
				names[m[1]+m[2]] = true
			}
		}
		fh.Close()
	}
	return names
})

// jargonIn lists the requirement IDs, Go selectors and exported Go
// names (of api/) that text holds.
func jargonIn(text string) []string {
	out := append(requirementID.FindAllString(text, -1), goName.FindAllString(text, -1)...)
	for _, w := range camelWord.FindAllString(text, -1) {
		if apiNames()[w] {
			out = append(out, w)
		}
	}
	return out
}

// checkJargon fails t for each piece of jargon in text, which an
// operator reads in where.
func checkJargon(t testing.TB, where, text string) {
	t.Helper()
	if j := jargonIn(text); len(j) > 0 {
		t.Errorf("%s holds %q, which an operator should not have to read: %q", where, j, excerpt(text, j[0]))
	}
}

// excerpt is the part of text around s.
func excerpt(text, s string) string {
	i := strings.Index(text, s)
	if i < 0 {
		return ""
	}
	return text[max(0, i-80):min(len(text), i+len(s)+80)]
}

// checkMessages checks the sentences of an API answer for people (an
// error's message, a probe result's message and summary) for jargon.
func checkMessages(t testing.TB, what string, body []byte) {
	t.Helper()
	var b struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
		Summary string `json:"summary"`
	}
	if json.Unmarshal(body, &b) != nil {
		return
	}
	if b.Error != nil {
		checkJargon(t, "the message of "+what, b.Error.Message)
	}
	checkJargon(t, "the message of "+what, b.Message)
	checkJargon(t, "the summary of "+what, b.Summary)
}

// checkPageJargon checks what the browser shows now (the text, and the
// labels read aloud and the placeholders) for jargon. Hover titles are
// not checked here: an API error's detail, the technical chain behind
// its sentence, is one (its words are the library's errors').
func checkPageJargon(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText + "\n" +
		Array.from(document.querySelectorAll("[aria-label], [placeholder]")).map(e => [e.getAttribute("aria-label"), e.getAttribute("placeholder")].filter(Boolean).join("\n")).join("\n") : ""`))
	if err != nil {
		t.Logf("%s: read the page's words: %v", name, err)
		return
	}
	checkJargon(t, "the page at "+name, s)
}

var (
	tagRe   = regexp.MustCompile(`(?s)<script.*?</script>|<[^>]*>`)
	attrRe  = regexp.MustCompile(`\b(?:title|aria-label|placeholder|alt)="([^"]*)"`)
	jsStrRe = regexp.MustCompile("\"(?:[^\"\\\\\\n]|\\\\.)*\"|`(?:[^`\\\\]|\\\\.)*`")
)

// pageWords is what a person reads in a page's HTML: its text and the
// attributes shown on hover or read aloud.
func pageWords(page string) string {
	var b strings.Builder
	b.WriteString(html.UnescapeString(tagRe.ReplaceAllString(page, " ")))
	for _, m := range attrRe.FindAllStringSubmatch(page, -1) {
		b.WriteString("\n" + html.UnescapeString(m[1]))
	}
	return b.String()
}

// No requirement ID, Go selector or exported Go name in what an operator
// reads (issue 53, Must hold 2): the help of every driver's config field,
// the Environments page as the server renders it in its states (every
// editor, the settings' notices, a board member's view), the sessions
// page, and the sentences of the page's script. The API's error messages
// are checked in every test that gets one (tenv.do), and the page as the
// browser shows it at every screenshot of the browser tests.
func TestNoJargonForOperators(t *testing.T) {
	all := []drivers.Driver{local.New(nil), ssh.New(nil), docker.New(nil), daytona.New(nil), fake.New(nil)}
	for _, d := range all {
		for _, f := range d.Schema().Fields {
			checkJargon(t, "the help of "+d.Name()+"'s field "+f.Name, f.Doc)
		}
	}
	// The checker finds what it looks for.
	for _, bad := range []string{"see CAP-2", "as probe.Result.Forwarding says", "see ScanHostKey"} {
		if len(jargonIn(bad)) == 0 {
			t.Errorf("jargonIn(%q) found nothing", bad)
		}
	}
	for _, fine := range []string{"Docker engine host", "OpenSSH private key", "repo@sha256:abc", "HTTP 401 from the API"} {
		if j := jargonIn(fine); len(j) != 0 {
			t.Errorf("jargonIn(%q) = %q", fine, j)
		}
	}

	e := newEnv(t, "sqlite", &envOpts{drivers: all})
	get := func(path string, p authz.Principal) string {
		t.Helper()
		req, _ := http.NewRequest("GET", e.ts.URL+path, nil)
		tok, _, err := e.s.host.newSession(t.Context(), p, testSource(t, p), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: tok})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	var localID string
	for _, v := range e.s.mustList(t) {
		if v.Driver == "local" {
			localID = v.ID
		}
	}
	admin := adminPrincipal
	board := authz.Principal{ID: "bob", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	paths := []string{envPagePath, envPagePath + "?edit=" + localID, sessionsPagePath}
	for _, d := range []string{"ssh", "docker", "daytona", "fake"} {
		paths = append(paths, envPagePath+"?new="+d)
	}
	for _, p := range paths {
		words := pageWords(get(p, admin))
		if !strings.Contains(words, "Signed in as") && !strings.Contains(words, "Sessions") {
			t.Errorf("the page %s reads %q", p, words)
		}
		checkJargon(t, "the page "+p, words)
	}
	checkJargon(t, "the board member's page", pageWords(get(envPagePath+"?edit="+localID, board)))

	// The settings' notices: managed sandboxes only, then disabled.
	sr := e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/settings", token: tokAdmin})
	sr = e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/settings", token: tokAdmin,
		header: map[string]string{"If-Match": sr.header.Get("ETag")}, body: map[string]any{"enableManagedSandboxOnly": true}})
	checkJargon(t, "the page with managed sandboxes only", pageWords(get(envPagePath, admin)))
	e.must(t, http.StatusOK, call{method: "PATCH", path: "/api/v1/settings", token: tokAdmin,
		header: map[string]string{"If-Match": sr.header.Get("ETag")}, body: map[string]any{"enableEnvironments": false}})
	checkJargon(t, "the page with environments disabled", pageWords(get(envPagePath, admin)))
	checkJargon(t, "the board member's page with environments disabled", pageWords(get(envPagePath, board)))

	// The sentences of the page's script (its string literals).
	for _, name := range []string{"envs.js", "sessions.js"} {
		b, err := assets.ReadFile("assets/" + name)
		if err != nil {
			t.Fatal(err)
		}
		strs := jsStrRe.FindAllString(string(b), -1)
		if len(strs) < 10 {
			t.Errorf("%s: %d strings found", name, len(strs))
		}
		for _, s := range strs {
			checkJargon(t, "a string of "+name, s)
		}
	}
}
