package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// A runner task in the sandbox's working directory sees a host copy of
// the sandbox's files, and what it changed goes back when it exits; what
// Files wrote meanwhile and the task did not touch stays.
func TestTaskDirCopiesTheTreeAndTakesTheTasksChangesBack(t *testing.T) {
	ctx := context.Background()
	d := New(nil)
	cfg, err := d.Schema().Normalize(map[string]any{"image": DefaultImage})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := d.Acquire(ctx, config.Config(cfg), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(ctx, drivers.Destroy)
	s := sb.(*sandbox)
	if err := s.PutArchive(ctx, ".", tarOf(t, map[string]string{"ws/main.c": "int main(){}\n", "ws/gone.txt": "x", "other.txt": "o"})); err != nil {
		t.Fatal(err)
	}

	dir, done, err := s.taskDir(defaultDir + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	host := filepath.Dir(dir)
	if b, err := os.ReadFile(filepath.Join(dir, "main.c")); err != nil || string(b) != "int main(){}\n" {
		t.Fatalf("the task's copy of main.c = %q, %v", b, err)
	}
	// The task edits, adds and deletes; Files writes beside it meanwhile.
	os.WriteFile(filepath.Join(dir, "main.c"), []byte("fixed\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "new.txt"), []byte("n"), 0o600)
	os.Remove(filepath.Join(dir, "gone.txt"))
	if err := s.PutArchive(ctx, ".", tarOf(t, map[string]string{"put-meanwhile.txt": "p"})); err != nil {
		t.Fatal(err)
	}
	done()
	if _, err := os.Stat(host); !os.IsNotExist(err) {
		t.Errorf("the task's host directory %s is still there (%v)", host, err)
	}
	var buf bytes.Buffer
	if err := s.GetArchive(ctx, ".", &buf); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Typeflag == tar.TypeReg {
			var b bytes.Buffer
			b.ReadFrom(tr)
			got[h.Name] = b.String()
		}
	}
	want := map[string]string{"ws/main.c": "fixed\n", "ws/new.txt": "n", "other.txt": "o", "put-meanwhile.txt": "p"}
	if len(got) != len(want) {
		t.Errorf("tree after the task = %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (tree %q)", k, got[k], v, got)
		}
	}

	// Another directory is the host's own; none out of the working
	// directory or missing in the sandbox is given.
	if dir, _, err := s.taskDir("/tmp"); err != nil || dir != "/tmp" {
		t.Errorf("taskDir(/tmp) = %q, %v; want the host's /tmp", dir, err)
	}
	for _, cwd := range []string{defaultDir + "/../etc", defaultDir + "/missing"} {
		if dir, _, err := s.taskDir(cwd); err == nil {
			t.Errorf("taskDir(%q) = %q, want an error", cwd, dir)
		}
	}
}
