package ssh

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/tarsafe"
)

// A task on a real SSH target (OpenSSH) builds a hostile tree: a link to
// /etc, a link up and out of the tree, a fifo. What the host gets is
// contained by tarsafe.Extract with an error naming the entry, and a path
// through the planted link is refused by the driver.
func TestFilesHostileSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := newHarness(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sb, err := h.Driver().Acquire(ctx, h.Config(), drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	files, err := drivers.SandboxAs[drivers.Files](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `set -e
rm -rf hostile && mkdir -p hostile/deep && cd hostile
ln -s /etc out
ln -s ../../../../.. deep/up
mkfifo pipe`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the task's script: %v %+v", err, res)
	}
	get := func(p string) ([]byte, error) {
		var b bytes.Buffer
		err := files.GetArchive(ctx, p, &b)
		return b.Bytes(), err
	}
	extract := func(b []byte) (string, error) {
		parent := t.TempDir()
		dst := filepath.Join(parent, "dst")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		err = tarsafe.Extract(bytes.NewReader(b), root, tarsafe.Options{})
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Errorf("something was written beside the destination: %v", ents)
		}
		return dst, err
	}
	b, err := get("hostile/out")
	if err != nil {
		t.Fatalf("GetArchive hostile/out: %v", err)
	}
	if _, err := extract(b); errcode.ReasonOf(err) != "unsafe_archive" || !strings.Contains(errcode.MessageOf(err), `"out"`) {
		t.Errorf("get hostile/out: %v, want unsafe_archive naming out", err)
	}
	b, err = get("hostile")
	if err != nil {
		t.Fatalf("GetArchive hostile: %v", err)
	}
	if _, err := extract(b); errcode.ReasonOf(err) != "unsafe_archive" {
		t.Errorf("get hostile: %v, want unsafe_archive", err)
	}
	for _, p := range []string{"hostile/out/passwd", "hostile/deep/up/etc"} {
		if _, err := get(p); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("GetArchive %s through a planted link = %v, want ErrInvalid", p, err)
		}
		if _, err := files.ReadDir(ctx, p); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("ReadDir %s through a planted link = %v, want a refusal", p, err)
		}
	}
}
