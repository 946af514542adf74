package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/internal/testenv"
)

// `envctl -plugins DIR` loads the plugins DIR's pins file lists: the fake
// served by a plugin replaces the compiled fake, and the listing shows it
// with its plugin's version and pin under it.
func TestPluginsFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := plugin.WriteManifest(ctx, plugin.Plugin{Binary: bin, SHA256: pin}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, plugin.PinsFile), []byte(pin+"  fakeplugin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "envctl.db")
	out, errOut, err := runCLI(t, "", "--db", db, "--test-mode", "--plugins", dir, "drivers")
	if err != nil {
		t.Fatalf("drivers: %v\n%s", err, errOut)
	}
	var fakeLine, pluginLine string
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		if strings.Contains(line, " fake ") || strings.HasPrefix(line, "fake ") {
			fakeLine = line
			if i+1 < len(lines) {
				pluginLine = lines[i+1]
			}
		}
	}
	if fakeLine == "" || !strings.Contains(fakeLine, "terminal") || !strings.Contains(fakeLine, "runner_ingress") {
		t.Errorf("the fake through its plugin: %q, want its capabilities, runner_ingress included\n%s", fakeLine, out)
	}
	if f := strings.Fields(pluginLine); len(f) < 5 || f[0] != "plugin" || f[2] != "1.0.0" || f[4] != "sha256:"+pin+"," {
		t.Errorf("the line under the fake through its plugin: %q, want its plugin's version and pin\n%s", pluginLine, out)
	}
	// The check can fail: the compiled fake has no plugin line.
	out, _, err = runCLI(t, "", "--db", db, "--test-mode", "drivers")
	if err != nil || strings.Contains(out, "sha256:") {
		t.Errorf("the compiled fake: %v\n%s", err, out)
	}
	// A pins file that names another binary's sum is refused, naming its line.
	if err := os.WriteFile(filepath.Join(dir, plugin.PinsFile), []byte(strings.Repeat("0", 64)+"  fakeplugin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runCLI(t, "", "--db", db, "--test-mode", "--plugins", dir, "drivers"); err == nil {
		t.Errorf("a wrong pin was accepted:\n%s", errOut)
	}
}
