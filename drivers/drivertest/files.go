package drivertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/tarsafe"
)

// RunFileTests runs the file subtests of the conformance suite alone
// (capability files; RunConformanceTests runs them too), for a driver's
// other configurations that place files elsewhere, such as Docker's
// read-only root with its tmpfs workdir. They are skipped for a driver
// that does not declare files.
//
// Requirements: WS-1.
func RunFileTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	gated(t, "files round trip", drivers.CapFiles, newHarness, testFilesRoundTrip)
	gated(t, "files outside the workdir are refused", drivers.CapFiles, newHarness, testFilesOutside)
	gated(t, "files a planted symlink is not followed", drivers.CapFiles, newHarness, testFilesPlantedLink)
}

// largeFile is the size of the round trip's large file: 64 MiB (the
// package's own tests, which run the whole suite on the fake a dozen times
// to prove that it fails wrong drivers, make it smaller; every driver's
// TestConformance, the fake's included, moves the 64 MiB).
var largeFile = 64 << 20

func filesOf(t *testing.T, sb drivers.Sandbox, h Harness) drivers.Files {
	t.Helper()
	f, err := drivers.SandboxAs[drivers.Files](sb, drivers.Narrowing(h.Driver(), 0))
	if err != nil {
		t.Fatalf("SandboxAs[Files]: %v", err)
	}
	return f
}

// treeOf describes every entry under dir: type, permission bits, size,
// content SHA-256 and link target; no times or owners.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v size=%d", fi.Mode(), fi.Size())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc = fmt.Sprintf("%v -> %s", fi.Mode().Type(), target)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		case fi.IsDir():
			desc = fi.Mode().String()
		}
		out[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return out
}

// put packs src with tarsafe.Create (nothing excluded) into PutArchive.
func put(ctx context.Context, f drivers.Files, dir, src string) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarsafe.Create(pw, root, tarsafe.Options{Exclude: []string{}})) }()
	err = f.PutArchive(ctx, dir, pr)
	pr.CloseWithError(errors.New("put ended"))
	return err
}

// get unpacks GetArchive of p with tarsafe.Extract into dst.
func get(ctx context.Context, f drivers.Files, p, dst string) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := tarsafe.Extract(pr, root, tarsafe.Options{})
		pr.CloseWithError(cmpErr(err, errors.New("extract ended")))
		done <- err
	}()
	err = f.GetArchive(ctx, p, pw)
	pw.CloseWithError(err)
	if xerr := <-done; err == nil {
		err = xerr
	}
	return err
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// FILES: a tree with modes, empty directories, a 0-byte file, long names,
// a relative symbolic link and a 64 MiB file goes in and comes back byte
// for byte.
func testFilesRoundTrip(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	f := filesOf(t, sb, h)
	top := "berth-rt-" + uniqueSuffix()
	src := t.TempDir()
	tree := filepath.Join(src, top)
	long := strings.Repeat("l", 200)
	deep := filepath.Join(strings.Repeat("d", 60), strings.Repeat("e", 60), strings.Repeat("f", 60), strings.Repeat("g", 60))
	for _, d := range []string{"empty", "private", "sub/empty", deep} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]fs.FileMode{"run.sh": 0o755, "secret": 0o600, "ro": 0o444, "zero": 0o644, long: 0o640, filepath.Join(deep, "leaf.txt"): 0o644, "sub/a.c": 0o644}
	for p, mode := range files {
		body := []byte("content of " + p + "\n")
		if p == "zero" {
			body = nil
		}
		if err := os.WriteFile(filepath.Join(tree, p), body, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(tree, p), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(tree, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, largeFile)
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	_, _ = rng.Read(big)
	if err := os.WriteFile(filepath.Join(tree, "large.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	big = nil
	if err := os.Symlink("sub/a.c", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}

	if err := put(ctx, f, ".", src); err != nil {
		t.Fatalf("PutArchive: %v", err)
	}
	back := t.TempDir()
	if err := get(ctx, f, top, back); err != nil {
		t.Fatalf("GetArchive %s: %v", top, err)
	}
	if diff := cmp.Diff(treeOf(t, tree), treeOf(t, back)); diff != "" {
		t.Errorf("the tree changed on its round trip (-put +got):\n%s", diff)
	}

	list, err := f.ReadDir(ctx, top)
	if err != nil {
		t.Fatalf("ReadDir %s: %v", top, err)
	}
	var names []string
	byName := map[string]drivers.FileInfo{}
	for _, fi := range list {
		names = append(names, fi.Name)
		byName[fi.Name] = fi
	}
	want := []string{deep[:60], "empty", "large.bin", "link", long, "private", "ro", "run.sh", "secret", "sub", "zero"}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("ReadDir names = %q, want %q", names, want)
	}
	if fi := byName["run.sh"]; fi.Mode != 0o755 || fi.Size != int64(len("content of run.sh\n")) {
		t.Errorf("ReadDir run.sh = %+v, want mode 0755 and its size", fi)
	}
	if fi := byName["large.bin"]; fi.Size != int64(largeFile) {
		t.Errorf("ReadDir large.bin size = %d, want %d", fi.Size, largeFile)
	}
	if fi := byName["link"]; fi.Mode.Type() != fs.ModeSymlink || fi.LinkTarget != "sub/a.c" {
		t.Errorf("ReadDir link = %+v, want a symbolic link to sub/a.c", fi)
	}
	if fi := byName["private"]; fi.Mode != fs.ModeDir|0o700 {
		t.Errorf("ReadDir private = %+v, want a 0700 directory", fi)
	}

	// One file comes back as one entry named by its base name.
	one := t.TempDir()
	if err := get(ctx, f, top+"/sub/a.c", one); err != nil {
		t.Fatalf("GetArchive of a file: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"a.c": treeOf(t, tree)["sub/a.c"]}, treeOf(t, one)); diff != "" {
		t.Errorf("GetArchive of a file (-want +got):\n%s", diff)
	}
}

// FILES: a path outside the working directory is refused, a missing one
// is not found.
func testFilesOutside(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	f := filesOf(t, sb, h)
	for _, p := range []string{"..", "../x", "a/../../x", "/etc", "/"} {
		if err := f.GetArchive(ctx, p, io.Discard); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("GetArchive %q = %v, want ErrInvalid", p, err)
		}
		if err := f.PutArchive(ctx, p, bytes.NewReader(emptyTar())); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("PutArchive %q = %v, want ErrInvalid", p, err)
		}
		if _, err := f.ReadDir(ctx, p); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("ReadDir %q = %v, want ErrInvalid", p, err)
		}
	}
	missing := "berth-missing-" + uniqueSuffix()
	if err := f.GetArchive(ctx, missing, io.Discard); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("GetArchive of a missing path = %v, want ErrNotFound", err)
	}
	if _, err := f.ReadDir(ctx, missing); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("ReadDir of a missing path = %v, want ErrNotFound", err)
	}
	if err := f.PutArchive(ctx, missing, bytes.NewReader(emptyTar())); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("PutArchive into a missing directory = %v, want ErrNotFound", err)
	}
}

func emptyTar() []byte {
	var b bytes.Buffer
	_ = tar.NewWriter(&b).Close()
	return b.Bytes()
}

// FILES: a symbolic link the task planted at the asked path goes as that
// link; the host's /etc is neither read nor written through it.
func testFilesPlantedLink(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	f := filesOf(t, sb, h)
	planted := "berth-planted-" + uniqueSuffix()
	if res := execOK(t, ctx, sb, drivers.Command{Argv: []string{"ln", "-s", "/etc", planted}}); res.ExitCode != 0 {
		t.Fatalf("ln -s /etc %s: exit %d: %s", planted, res.ExitCode, res.Stderr)
	}
	var b bytes.Buffer
	if err := f.GetArchive(ctx, planted, &b); err != nil {
		t.Fatalf("GetArchive of the planted link: %v", err)
	}
	tr := tar.NewReader(bytes.NewReader(b.Bytes()))
	var entries []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		entries = append(entries, fmt.Sprintf("%s %c %s", hdr.Name, hdr.Typeflag, hdr.Linkname))
	}
	if want := []string{planted + " 2 /etc"}; !slices.Equal(entries, want) {
		t.Errorf("GetArchive of a link to /etc = %q, want the link itself %q", entries, want)
	}
	dst, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := tarsafe.Extract(bytes.NewReader(b.Bytes()), dst, tarsafe.Options{}); errcode.ReasonOf(err) != "unsafe_archive" {
		t.Errorf("Extract of the link to /etc = %v, want unsafe_archive", err)
	}

	// Through the link: never the host's /etc.
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	b.Reset()
	if err := f.GetArchive(ctx, planted+"/passwd", &b); err == nil && h.Driver().Capabilities().Kind == drivers.KindHost {
		t.Errorf("GetArchive %s/passwd on a host target: nil error, want a refusal", planted)
	} else if err == nil && len(hostPasswd) > 0 && bytes.Contains(b.Bytes(), hostPasswd) {
		t.Errorf("GetArchive %s/passwd returned the host's /etc/passwd", planted)
	}
	mark := "berth-conformance-" + uniqueSuffix()
	var ab bytes.Buffer
	tw := tar.NewWriter(&ab)
	_ = tw.WriteHeader(&tar.Header{Name: mark, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	err = f.PutArchive(ctx, planted, &ab)
	if _, serr := os.Lstat(filepath.Join("/etc", mark)); serr == nil {
		_ = os.Remove(filepath.Join("/etc", mark))
		t.Errorf("PutArchive into the planted link wrote the host's /etc/%s (err %v)", mark, err)
	}
	if err == nil && h.Driver().Capabilities().Kind == drivers.KindHost {
		t.Errorf("PutArchive into a link out of the workdir on a host target: nil error, want a refusal")
	}

	list, err := f.ReadDir(ctx, ".")
	if err != nil {
		t.Fatalf("ReadDir .: %v", err)
	}
	i := slices.IndexFunc(list, func(fi drivers.FileInfo) bool { return fi.Name == planted })
	if i < 0 {
		t.Errorf("ReadDir . does not list %s", planted)
	} else if list[i].Mode.Type() != fs.ModeSymlink || list[i].LinkTarget != "/etc" {
		t.Errorf("ReadDir . lists %s as %+v, want a symbolic link to /etc", planted, list[i])
	}
}
