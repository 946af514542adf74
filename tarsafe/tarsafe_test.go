package tarsafe_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/tarsafe"
)

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	size       int64 // for a header that lies; 0: len(body)
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body))}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func openRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// listing returns what lies under dir, outside included, as "path type".
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel+" "+d.Type().String())
		}
		return nil
	})
	return out
}

// Requirements: WS-2.
func TestExtractRefusesHostileArchives(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		reason  string
		names   string // the entry the error must name
	}{
		{"dotdot", []entry{{name: "../evil", typ: tar.TypeReg, body: "x"}}, "unsafe_archive", "../evil"},
		{"dotdot inside", []entry{{name: "a/../../evil", typ: tar.TypeReg, body: "x"}}, "unsafe_archive", "a/../../evil"},
		{"absolute", []entry{{name: "/tmp/evil", typ: tar.TypeReg, body: "x"}}, "unsafe_archive", "/tmp/evil"},
		{"symlink absolute", []entry{{name: "etc", typ: tar.TypeSymlink, link: "/etc"}}, "unsafe_archive", "etc"},
		{"symlink up", []entry{{name: "a/up", typ: tar.TypeSymlink, link: "../../x"}}, "unsafe_archive", "a/up"},
		{"symlink dotdot after element", []entry{{name: "t", typ: tar.TypeSymlink, link: "u/v/../.."}}, "unsafe_archive", "t"},
		{"long names", []entry{{name: strings.Repeat("n", 39), typ: tar.TypeSymlink, link: strings.Repeat("t/", 30) + "../x"}}, "unsafe_archive", strings.Repeat("n", 39)},
		{"write through a link of the archive", []entry{
			{name: "d", typ: tar.TypeSymlink, link: "sub"},
			{name: "sub/", typ: tar.TypeDir, mode: 0o755},
			{name: "d/f", typ: tar.TypeReg, body: "x"}}, "unsafe_archive", "d/f"},
		{"hard link out", []entry{{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}}, "unsafe_archive", "h"},
		{"hard link absolute", []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, "unsafe_archive", "h"},
		{"hard link to a symlink", []entry{
			{name: "s", typ: tar.TypeSymlink, link: "x"},
			{name: "h", typ: tar.TypeLink, link: "s"}}, "unsafe_archive", "h"},
		{"char device", []entry{{name: "null", typ: tar.TypeChar}}, "unsafe_archive", "null"},
		{"block device", []entry{{name: "sda", typ: tar.TypeBlock}}, "unsafe_archive", "sda"},
		{"fifo", []entry{{name: "pipe", typ: tar.TypeFifo}}, "unsafe_archive", "pipe"},
		{"replace a dir", []entry{
			{name: "d/", typ: tar.TypeDir, mode: 0o755},
			{name: "d", typ: tar.TypeReg, body: "x"}}, "unsafe_archive", "d"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			err := tarsafe.Extract(archive(t, tc.entries...), openRoot(t, dst), tarsafe.Options{})
			if err == nil {
				t.Fatalf("Extract = nil, want a refusal")
			}
			if got := errcode.ReasonOf(err); got != tc.reason {
				t.Errorf("reason = %q, want %q (%v)", got, tc.reason, err)
			}
			if !errors.Is(err, errcode.ErrInvalid) {
				t.Errorf("err = %v, want it to wrap ErrInvalid", err)
			}
			if msg := errcode.MessageOf(err); len(msg) > 200 {
				t.Errorf("message of %d characters, want at most 200: %q", len(msg), msg)
			}
			if msg := errcode.MessageOf(err); !strings.Contains(msg, `"`+tc.names+`"`) {
				t.Errorf("message %q does not name the entry %q", msg, tc.names)
			}
			if got := listing(t, parent); slices.ContainsFunc(got, func(s string) bool { return !strings.HasPrefix(s, "dst") }) {
				t.Errorf("something was written outside the destination: %q", got)
			}
		})
	}
}

// Requirements: WS-2.
func TestExtractDoesNotFollowALinkPlantedInTheDestination(t *testing.T) {
	parent := t.TempDir()
	dst, outside := filepath.Join(parent, "dst"), filepath.Join(parent, "outside")
	for _, d := range []string{dst, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dst, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "f"), filepath.Join(dst, "file")); err != nil {
		t.Fatal(err)
	}
	err := tarsafe.Extract(archive(t, entry{name: "out/f", typ: tar.TypeReg, body: "evil"}), openRoot(t, dst), tarsafe.Options{})
	if errcode.ReasonOf(err) != "unsafe_archive" {
		t.Errorf("Extract through a planted link = %v, want unsafe_archive", err)
	}
	// A file entry replaces a planted link at its own name, never writes through it.
	if err := tarsafe.Extract(archive(t, entry{name: "file", typ: tar.TypeReg, body: "new"}), openRoot(t, dst), tarsafe.Options{}); err != nil {
		t.Fatalf("Extract over a planted link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "f")); string(b) != "host" {
		t.Errorf("the host's file became %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "file")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("dst/file = %v, %v; want a regular file", fi, err)
	}
}

func TestExtractLimits(t *testing.T) {
	dst := openRoot(t, t.TempDir())
	err := tarsafe.Extract(archive(t, entry{name: "a", typ: tar.TypeReg, body: "12345"}, entry{name: "b", typ: tar.TypeReg, body: "67890"}),
		dst, tarsafe.Options{MaxBytes: 8})
	if errcode.ReasonOf(err) != "archive_too_large" || !strings.Contains(errcode.MessageOf(err), `"b"`) {
		t.Errorf("past MaxBytes: %v (%q), want archive_too_large naming b", err, errcode.MessageOf(err))
	}
	var many []entry
	for i := range 5 {
		many = append(many, entry{name: strings.Repeat("x", i+1), typ: tar.TypeReg})
	}
	err = tarsafe.Extract(archive(t, many...), openRoot(t, t.TempDir()), tarsafe.Options{MaxEntries: 4})
	if errcode.ReasonOf(err) != "archive_too_large" || !strings.Contains(errcode.MessageOf(err), `"xxxxx"`) {
		t.Errorf("past MaxEntries: %v, want archive_too_large naming xxxxx", err)
	}
	// A header that claims more than the default limit is refused before a byte is written.
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Size: 2 << 30, Mode: 0o644})
	err = tarsafe.Extract(&b, openRoot(t, t.TempDir()), tarsafe.Options{})
	if errcode.ReasonOf(err) != "archive_too_large" {
		t.Errorf("a 2 GiB header under the default limit: %v, want archive_too_large", err)
	}
	if err := tarsafe.Extract(&b, dst, tarsafe.Options{MaxBytes: -1}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("negative limit: %v, want ErrInvalid", err)
	}
}

func TestExtractDropsSetuidAndKeepsModes(t *testing.T) {
	dir := t.TempDir()
	err := tarsafe.Extract(archive(t,
		entry{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		entry{name: "ro/suid", typ: tar.TypeReg, mode: 0o4755 | 0o2000, body: "#!/bin/sh\n"},
		entry{name: "ro/sticky/", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "ro/link", typ: tar.TypeSymlink, link: "suid"},
		entry{name: "ro/hard", typ: tar.TypeLink, link: "ro/suid"},
	), openRoot(t, dir), tarsafe.Options{})
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	for p, want := range map[string]fs.FileMode{"ro": fs.ModeDir | 0o555, "ro/suid": 0o755, "ro/sticky": fs.ModeDir | 0o777, "ro/hard": 0o755} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode(), err, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(dir, "ro/link")); err != nil || target != "suid" {
		t.Errorf("ro/link -> %q, %v", target, err)
	}
}

// Requirements: WS-2.
func TestCreateRoundTripsAndExcludes(t *testing.T) {
	src, secret := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(secret, "id_ed25519"), []byte("KEY"), 0o600))
	must(os.MkdirAll(filepath.Join(src, "sub/empty"), 0o750))
	must(os.MkdirAll(filepath.Join(src, ".git"), 0o755))
	long := strings.Repeat("n", 200)
	for p, body := range map[string]string{"a.c": "int main;", "sub/zero": "", "sub/" + long: "long", ".env": "S=1", ".env.prod": "S=2",
		"key.pem": "P", "sub/id_rsa": "K", ".git/config": "[remote] url=https://tok@x", ".git/HEAD": "ref"} {
		must(os.WriteFile(filepath.Join(src, p), []byte(body), 0o640))
	}
	must(os.Chmod(filepath.Join(src, "a.c"), 0o755))
	must(os.Symlink(secret, filepath.Join(src, "ssh")))
	must(os.Symlink("a.c", filepath.Join(src, "rel")))

	var b bytes.Buffer
	must(tarsafe.Create(&b, openRoot(t, src), tarsafe.Options{}))
	var names []string
	tr := tar.NewReader(bytes.NewReader(b.Bytes()))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Name == "ssh" && (h.Typeflag != tar.TypeSymlink || h.Linkname != secret) {
			t.Errorf("ssh went in as %q -> %q, want the link itself", h.Typeflag, h.Linkname)
		}
	}
	want := []string{".git/", ".git/HEAD", "a.c", "rel", "ssh", "sub/", "sub/empty/", "sub/" + long, "sub/zero"}
	if !slices.Equal(names, want) {
		t.Errorf("entries = %q\nwant %q", names, want)
	}
	if bytes.Contains(b.Bytes(), []byte("KEY")) || bytes.Contains(b.Bytes(), []byte("tok@")) {
		t.Errorf("a secret went into the archive")
	}

	// The absolute link is the host's: Extract refuses it, the rest round-trips.
	dst := t.TempDir()
	err := tarsafe.Extract(bytes.NewReader(b.Bytes()), openRoot(t, dst), tarsafe.Options{})
	if errcode.ReasonOf(err) != "unsafe_archive" || !strings.Contains(errcode.MessageOf(err), `"ssh"`) {
		t.Errorf("Extract of an absolute link: %v, want unsafe_archive naming ssh", err)
	}
	b.Reset()
	must(os.Remove(filepath.Join(src, "ssh")))
	must(tarsafe.Create(&b, openRoot(t, src), tarsafe.Options{Exclude: []string{}}))
	dst = t.TempDir()
	must(tarsafe.Extract(&b, openRoot(t, dst), tarsafe.Options{}))
	if got, want := listing(t, dst), listing(t, src); !slices.Equal(got, want) {
		t.Errorf("round trip with no excludes: %q, want %q", got, want)
	}
	if fi, err := os.Stat(filepath.Join(dst, "a.c")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("a.c mode %v, %v", fi.Mode(), err)
	}

	if err := tarsafe.Create(&b, openRoot(t, src), tarsafe.Options{Exclude: []string{"["}}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("bad pattern: %v, want ErrInvalid", err)
	}
	if err := tarsafe.Create(&b, openRoot(t, src), tarsafe.Options{MaxEntries: 2}); errcode.ReasonOf(err) != "archive_too_large" {
		t.Errorf("Create past MaxEntries: %v", err)
	}
}
