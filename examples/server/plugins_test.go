package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
)

// buildFakePlugin builds the fake plugin into dir/fakeplugin, writes its
// manifest and returns its pin.
func buildFakePlugin(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "fakeplugin")
	if out, err := testenv.GoBuild(bin, "github.com/berthdev/berth/drivers/plugin/internal/fakeplugin"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	pin := hex.EncodeToString(h[:])
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	if err := plugin.WriteManifest(wctx, plugin.Plugin{Binary: bin, SHA256: pin}); err != nil {
		t.Fatal(err)
	}
	return pin
}

// `server -plugins DIR`: the fake served by its plugin replaces the
// compiled fake, and GET /api/v1/drivers lists it with its plugin's
// version and pin and the capabilities the plugin declares.
func TestPluginsFlag(t *testing.T) {
	dir := t.TempDir()
	pin := buildFakePlugin(t, dir)
	if err := os.WriteFile(filepath.Join(dir, plugin.PinsFile), []byte(pin+"  fakeplugin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokFile, []byte(testTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-listen", "127.0.0.1:0", "-data", filepath.Join(dir, "data"), "-drivers", "local,fake", "-test-mode",
			"-tokens", tokFile, "-plugins", dir}, stderr, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-errc:
		cancel()
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run after cancel: %v\n%s", err, stderr.String())
		}
	}()
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/v1/drivers", nil)
	req.Header.Set("Authorization", "Bearer "+tokAgent)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body json.RawMessage
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET drivers: %d, %v", res.StatusCode, err)
	}
	text := string(body)
	i := strings.Index(text, `"fake"`)
	if i < 0 {
		t.Fatalf("no fake in %s", text)
	}
	fake := text[i:]
	if j := strings.Index(fake[1:], `"name"`); j >= 0 {
		fake = fake[:j]
	}
	if !strings.Contains(fake, "terminal") || !strings.Contains(fake, "runner_ingress") {
		t.Errorf("the fake through its plugin: %s, want the fake's capabilities, runner_ingress included", fake)
	}
	if !strings.Contains(fake, `"version":"1.0.0","sha256":"`+pin+`"`) {
		t.Errorf("the fake through its plugin: %s, want its plugin's version and pin", fake)
	}
}

// A driver a plugin serves is listed with its plugin (binary, version,
// pin) by GET /api/v1/drivers, as the OpenAPI document says (the
// harness validates the response), and in the page's drivers table; a
// compiled driver has none.
func TestPluginDriverListed(t *testing.T) {
	dir := t.TempDir()
	pin := buildFakePlugin(t, dir)
	p := plugin.Plugin{Binary: filepath.Join(dir, "fakeplugin"), SHA256: pin}
	d, err := plugin.Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.(io.Closer).Close()
	e := newEnv(t, "sqlite", &envOpts{drivers: []drivers.Driver{d, local.New(nil)}})
	var list struct {
		Items []struct {
			Name   string              `json:"name"`
			Plugin *drivers.PluginInfo `json:"plugin"`
		} `json:"items"`
	}
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/drivers", token: tokAgent}).decode(t, &list)
	seen := 0
	for _, it := range list.Items {
		switch it.Name {
		case "fake":
			seen++
			if it.Plugin == nil || *it.Plugin != (drivers.PluginInfo{Binary: p.Binary, Version: "1.0.0", SHA256: pin}) {
				t.Errorf("the fake through its plugin lists plugin %+v, want its binary, version 1.0.0 and pin", it.Plugin)
			}
		case "local":
			seen++
			if it.Plugin != nil {
				t.Errorf("the compiled local driver lists plugin %+v, want none", it.Plugin)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("GET /api/v1/drivers: %+v, want fake and local", list.Items)
	}
	link, err := e.s.host.ensureAdmin(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin := sessionCookieOf(t, e.do(t, call{method: "GET", path: "/login?link=" + url.QueryEscape(link)}))
	page := string(e.must(t, http.StatusOK, call{method: "GET", path: envPagePath, cookie: admin}).body)
	want := fmt.Sprintf(`<span class="plugin help" title="pin sha256:%s, binary %s">plugin 1.0.0, pin %s</span>`, pin, p.Binary, pin[:12])
	if !strings.Contains(page, want) {
		t.Errorf("the page's drivers table does not show the plugin: want %s", want)
	}
}
