//go:build unix

package workspace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berthdev/berth/internal/wsscript"
)

// The script a sandbox runs (wsscript.Facts, here by the host's sh,
// find, stat and sha256sum) and the host's treeHash agree on a tree with
// modes, empty directories, a 0-byte file, spaces, a backslash, unicode,
// long names, links in and out and a fifo; a name with a newline is
// refused with its own exit status.
func TestFactsScriptMatchesTreeHash(t *testing.T) {
	dir := t.TempDir()
	put := func(p, c string, mode os.FileMode) {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, p), mode)
	}
	put("src/main.c", "int main(void) { return 0; }\n", 0o644)
	put("run.sh", "#!/bin/sh\n", 0o755)
	put("empty", "", 0o600)
	put("a name with spaces", "x", 0o640)
	put(`back\slash`, "y", 0o644)
	put("ünïcode/"+strings.Repeat("l", 200), strings.Repeat("z", 1<<16), 0o644)
	os.Mkdir(filepath.Join(dir, "empty-dir"), 0o700)
	os.Chmod(filepath.Join(dir, "empty-dir"), 0o700)
	os.Mkdir(filepath.Join(dir, "sticky"), 0o755)
	os.Chmod(filepath.Join(dir, "sticky"), 0o1777)
	for link, target := range map[string]string{"to-etc": "/etc", "to-src": "src/main.c", "dangling": "no where"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	facts := func() ([]byte, int) {
		cmd := exec.Command("sh", "-c", wsscript.Facts, "berth-ws", filepath.Base(dir))
		cmd.Dir = filepath.Dir(dir)
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return out, ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out, 0
	}
	out, code := facts()
	if code != 0 {
		t.Fatalf("the script exited %d", code)
	}
	m, err := parseFacts(out)
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	want, err := treeHash(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := hashStream(m.stream()); got != want {
		t.Errorf("the script's facts hash to %s, TreeHash says %s\n%s", got, want, out)
	}
	back, err := parseStream(m.stream())
	if err != nil || len(back) != len(m) || back[3] != m[3] {
		t.Errorf("the stream read back: %d entries, %v", len(back), err)
	}
	put("new\nline", "", 0o644)
	if _, code := facts(); code != wsscript.ExitNewline {
		t.Errorf("a name with a newline: exit %d, want %d", code, wsscript.ExitNewline)
	}
}

// What the sandbox prints is the task's to forge: facts out of shape are
// errors, never a hash.
func TestParseFactsRefusesForgeries(t *testing.T) {
	for name, out := range map[string]string{
		"no sections":        "",
		"no end":             "S\nH\nL\n",
		"bad stat":           "S\nzz 1 ./a\nH\nL\nE\n",
		"twice":              "S\n81a4 1 ./a\n81a4 1 ./a\nH\nL\nE\n",
		"digest of a dir":    "S\n41ed 0 ./d\nH\n" + strings.Repeat("0", 64) + "  ./d\nL\nE\n",
		"file without sum":   "S\n81a4 1 ./a\nH\nL\nE\n",
		"target of a file":   "S\n81a4 0 ./a\nH\n" + strings.Repeat("0", 64) + "  ./a\nL\n./a\n/etc\nE\n",
		"trailing lines":     "S\nH\nL\nE\nS\n",
		"unknown type":       "S\nf1a4 0 ./a\nH\nL\nE\n",
		"name not under dot": "S\n81a4 0 /etc/passwd\nH\nL\nE\n",
	} {
		if _, err := parseFacts([]byte(out)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
