package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/internal/syncbuf"
)

// `server -plugins DIR`: the fake served by its plugin replaces the
// compiled fake, and GET /api/v1/drivers lists the capabilities the
// protocol carries (no runner_ingress).
func TestPluginsFlag(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakeplugin")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/berthdev/berth/drivers/plugin/internal/fakeplugin").CombinedOutput(); err != nil {
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
	if !strings.Contains(fake, "terminal") || strings.Contains(fake, "runner_ingress") {
		t.Errorf("the fake through its plugin: %s, want the protocol's capabilities without runner_ingress", fake)
	}
}
