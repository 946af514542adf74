package plugin_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"

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
