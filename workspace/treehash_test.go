//go:build unix

package workspace_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/workspacehook"
	_ "github.com/berthdev/berth/workspace" // sets workspacehook.TreeHash
)

// treeScript is the tree hash as a script in a sandbox computes it with
// find, sort and sha256sum (bash; GNU findutils and coreutils): the
// definition in the package doc, written a second way.
const treeScript = `set -euo pipefail
cd "$1"
find . -mindepth 1 -printf '%P\0' | LC_ALL=C sort -z | while IFS= read -r -d '' p; do
	read -r t m s < <(find "./$p" -maxdepth 0 -printf '%y %m %s\n')
	d= l=
	case $t in
	f) d=$(sha256sum < "./$p" | cut -d' ' -f1) ;;
	l) m=0 s=0 l=$(readlink -- "./$p") ;;
	*) s=0 ;;
	esac
	printf '%s\0%s\0%s\0%s\0%s\0%s\0' "$p" "$t" "$m" "$s" "$d" "$l"
done | sha256sum | cut -d' ' -f1
`

func treeHash(t *testing.T, dir string) string {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	h, err := workspacehook.TreeHash(root)
	if err != nil {
		t.Fatalf("TreeHash(%s): %v", dir, err)
	}
	return h
}

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// A tree of one directory and one file hashes to the bytes the package
// doc defines.
func TestTreeHashDefinition(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o750); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "d"), 0o750)
	write(t, filepath.Join(dir, "d", "a"), "hi\n", 0o644)
	write(t, filepath.Join(dir, "d.txt"), "", 0o600)
	if err := os.Symlink("../etc", filepath.Join(dir, "d", "up")); err != nil {
		t.Fatal(err)
	}
	c := sha256.Sum256([]byte("hi\n"))
	e := sha256.Sum256(nil)
	// Sorted as bytes: "d" < "d.txt" < "d/a" < "d/up".
	stream := "d\x00d\x00750\x000\x00\x00\x00" + "d.txt\x00f\x00600\x000\x00" + hex.EncodeToString(e[:]) + "\x00\x00" +
		"d/a\x00f\x00644\x003\x00" + hex.EncodeToString(c[:]) + "\x00\x00" + "d/up\x00l\x000\x000\x00\x00../etc\x00"
	want := sha256.Sum256([]byte(stream))
	if got := treeHash(t, dir); got != "sha256:"+hex.EncodeToString(want[:]) {
		t.Errorf("TreeHash = %s, want sha256:%x", got, want)
	}
}

// The host's computation and the script's agree on a tree with modes,
// empty directories, a 0-byte file, odd names, links in and out, a fifo.
func TestTreeHashMatchesScript(t *testing.T) {
	for _, tool := range []string{"bash", "find", "sort", "sha256sum", "readlink"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("BERTH_REQUIRE_REAL") != "" {
				t.Fatalf("%s: %v", tool, err)
			}
			t.Skipf("%s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "src", "main.c"), "int main(void) { return 0; }\n", 0o644)
	write(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(dir, "suid"), "x", 0o4755)
	write(t, filepath.Join(dir, "empty"), "", 0o600)
	write(t, filepath.Join(dir, "a name with spaces\nand a newline"), "odd\n", 0o640)
	write(t, filepath.Join(dir, "ünïcode", strings.Repeat("l", 200)), strings.Repeat("z", 1<<20), 0o644)
	for _, d := range []string{"empty-dir", "sticky"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "sticky"), 0o1777)
	for link, target := range map[string]string{"to-etc": "/etc", "to-src": "src/main.c", "dangling": "nowhere"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", "-c", treeScript, "treescript", dir).Output()
	if err != nil {
		t.Fatalf("the script: %v", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	type result struct {
		h   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := workspacehook.TreeHash(root)
		done <- result{h, err}
	}()
	select {
	case r := <-done:
		if want := "sha256:" + strings.TrimSpace(string(out)); r.err != nil || r.h != want {
			t.Errorf("TreeHash = %s, %v; the script says %s", r.h, r.err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("TreeHash blocked (on the fifo?)")
	}
}

// Times do not count; content, bits, names and link targets do.
func TestTreeHashChanges(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "f"), "abc", 0o644)
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	base := treeHash(t, dir)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "f"), old, old); err != nil {
		t.Fatal(err)
	}
	if got := treeHash(t, dir); got != base {
		t.Errorf("an mtime changed the hash: %s, was %s", got, base)
	}
	for name, change := range map[string]func(){
		"content": func() { write(t, filepath.Join(dir, "f"), "abd", 0o644) },
		"bits":    func() { os.Chmod(filepath.Join(dir, "f"), 0o755) },
		"name":    func() { os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")) },
		"link":    func() { os.Remove(filepath.Join(dir, "l")); os.Symlink("g", filepath.Join(dir, "l")) },
		"new dir": func() { os.Mkdir(filepath.Join(dir, "e"), 0o755) },
	} {
		before := treeHash(t, dir)
		change()
		if got := treeHash(t, dir); got == before {
			t.Errorf("a change of %s left the hash %s", name, got)
		}
	}
}
