package plugin_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/errcode"
)

// An operator pins a plugin by the SHA-256 of the binary they chose; a
// binary that does not match (replaced, tampered with) is never started,
// neither to write its manifest nor to serve a call.
func ExampleWriteManifest() {
	dir, err := os.MkdirTemp("", "plugins")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	bin, ran := filepath.Join(dir, "acme"), filepath.Join(dir, "ran")
	chosen := []byte("#!/bin/sh\necho chosen\n")
	pin := fmt.Sprintf("%x", sha256.Sum256(chosen))
	// The file on disk is not the one the operator pinned.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\ntouch "+ran+"\n"), 0o755); err != nil {
		fmt.Println(err)
		return
	}
	err = plugin.WriteManifest(context.Background(), plugin.Plugin{Binary: bin, SHA256: pin})
	_, statErr := os.Stat(ran)
	fmt.Println("refused:", err != nil, "code:", errcode.Code(err), "started:", statErr == nil)
	// Output:
	// refused: true code: unavailable started: false
}

// installPlugin is the operator's step, once per binary: pin is the
// binary's SHA-256 as sha256sum prints it, and the manifest is written
// beside the binary. The README shows it (TestREADMEPluginIsTested).
func installPlugin(ctx context.Context, bin, pin string) error {
	return plugin.WriteManifest(ctx, plugin.Plugin{Binary: bin, SHA256: pin})
}

// loadPlugin is the host's step: nothing starts until a call needs the
// driver, which the host passes in berth.Options.Drivers. The README shows
// it.
func loadPlugin(bin, pin string) (drivers.Driver, error) {
	return plugin.Load(plugin.Plugin{Binary: bin, SHA256: pin}, nil)
}

// A provider plugin: the Daytona driver in a binary of its own, whose main
// is plugin.Serve(daytona.New(nil), "1.0.0") (internal/daytonaplugin),
// installed by the operator and loaded by a host. The host's driver is the
// plugin's, with what the Daytona driver implements: it lists the
// provider's images.
func ExampleLoad() {
	dir, err := os.MkdirTemp("", "plugins")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "daytona")
	if out, err := goBuild(bin, "github.com/berthdev/berth/drivers/plugin/internal/daytonaplugin"); err != nil {
		fmt.Println(err, string(out))
		return
	}
	pin := sum(bin)
	if err := installPlugin(context.Background(), bin, pin); err != nil {
		fmt.Println(err)
		return
	}
	d, err := loadPlugin(bin, pin)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.(io.Closer).Close()
	_, lists := d.(drivers.ImageLister)
	fmt.Println(d.Name(), d.(drivers.PluginReporter).PluginInfo().Version, "lists images:", lists)
	// Output:
	// daytona 1.0.0 lists images: true
}
