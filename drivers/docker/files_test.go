package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/tarsafe"
)

// The file subtests on a read-only root, whose workdir is a tmpfs the
// archive API does not see (tar through exec), on network none.
func TestFilesReadonlyRoot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(e.img.Ref, map[string]any{"network": "none", docker.FieldReadonlyRootfs: true, docker.FieldWorkdir: "/workspace"})
	drivertest.RunFileTests(t, func(context.Context, testing.TB) (drivertest.Harness, error) {
		return &harness{e: e, cfg: cfg}, nil
	})
}

// A task in a real sandbox builds a hostile tree (a link to /etc, a link
// up and out, an archive with ".." names made by tar in the sandbox); what
// the host gets is contained by tarsafe.Extract, with an error naming the
// entry, on both the archive API and the exec path.
func TestFilesHostileSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, overrides := range map[string]map[string]any{
		"archive API":      {"network": "none"},
		"tar through exec": {"network": "none", docker.FieldReadonlyRootfs: true, docker.FieldWorkdir: "/workspace"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sb, err := e.drv.Acquire(ctx, e.config(e.img.Ref, overrides), drivers.AcquireRequest{})
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			defer sb.Release(context.Background(), drivers.Destroy)
			files, err := drivers.SandboxAs[drivers.Files](sb, drivers.Narrowing(e.drv, 0))
			if err != nil {
				t.Fatal(err)
			}
			// The task: out -> /etc, up -> ../../../../.., a fifo, and an
			// archive made by the sandbox's tar whose member is ../evil: tar
			// strips "..", so it archives +1/evil and writes ".." over "+1"
			// (the same byte sum: the header's checksum still holds).
			res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `set -e
mkdir -p hostile/deep/er && cd hostile
ln -s /etc out
ln -s ../../../../.. deep/up
mkfifo pipe
mkdir +1 && echo pwned > +1/evil
tar -c -f dotdot.tar +1/evil
printf .. | dd of=dotdot.tar bs=1 count=2 conv=notrunc 2>/dev/null
rm -r +1`}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("the task's script: %v %+v %s", err, res, res.Stderr)
			}
			if !strings.Contains(string(mustGet(t, ctx, files, "hostile/dotdot.tar")), "../evil") {
				t.Fatalf("the sandbox's tar did not keep the .. name")
			}

			extract := func(p string) (string, error) {
				dst := t.TempDir()
				root, err := os.OpenRoot(dst)
				if err != nil {
					t.Fatal(err)
				}
				defer root.Close()
				err = tarsafe.Extract(bytes.NewReader(mustGet(t, ctx, files, p)), root, tarsafe.Options{})
				return dst, err
			}
			// The link at the asked path comes as the link; Extract refuses it, naming it.
			if _, err := extract("hostile/out"); errcode.ReasonOf(err) != "unsafe_archive" || !strings.Contains(errcode.MessageOf(err), `"out"`) {
				t.Errorf("get hostile/out: %v (%q), want unsafe_archive naming out", err, errcode.MessageOf(err))
			}
			// The tree: the link up is refused by name, nothing lands outside.
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			_ = os.Mkdir(dst, 0o755)
			root, _ := os.OpenRoot(dst)
			err = tarsafe.Extract(bytes.NewReader(mustGet(t, ctx, files, "hostile")), root, tarsafe.Options{})
			root.Close()
			if errcode.ReasonOf(err) != "unsafe_archive" {
				t.Errorf("get hostile: %v, want unsafe_archive", err)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("something was written beside the destination: %v", ents)
			}
			// The sandbox's own archive with a ".." member, unpacked on the host.
			dot := t.TempDir()
			root, _ = os.OpenRoot(filepath.Join(dot))
			err = tarsafe.Extract(untarOne(t, mustGet(t, ctx, files, "hostile/dotdot.tar")), root, tarsafe.Options{})
			root.Close()
			if errcode.ReasonOf(err) != "unsafe_archive" || !strings.Contains(errcode.MessageOf(err), `"../evil"`) {
				t.Errorf("the sandbox's .. archive: %v, want unsafe_archive naming ../evil", err)
			}
			// Put into the planted link stays in the sandbox.
			var ab bytes.Buffer
			tw := tar.NewWriter(&ab)
			_ = tw.WriteHeader(&tar.Header{Name: "berth-put-mark", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
			_, _ = tw.Write([]byte("x"))
			_ = tw.Close()
			_ = files.PutArchive(ctx, "hostile/out", &ab)
			if _, err := os.Lstat("/etc/berth-put-mark"); !errors.Is(err, os.ErrNotExist) {
				_ = os.Remove("/etc/berth-put-mark")
				t.Errorf("a put through the planted link reached the host's /etc")
			}
		})
	}
}

// mustGet returns GetArchive of p.
func mustGet(t *testing.T, ctx context.Context, f drivers.Files, p string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f.GetArchive(ctx, p, &b); err != nil {
		t.Fatalf("GetArchive %s: %v", p, err)
	}
	return b.Bytes()
}

// untarOne returns the content of the one file an archive holds.
func untarOne(t *testing.T, b []byte) io.Reader {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(body)
}
