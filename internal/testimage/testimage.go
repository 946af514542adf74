// Package testimage builds the container images that tests run: a
// busybox-static image made with go-containerregistry from Debian's
// busybox-static binary, pushed to a loopback registry
// (internal/testenv.StartRegistry) so that the Docker engine pulls it by
// digest. No image ever comes from an outside registry.
//
//	reg := testenv.StartRegistry(t, nil)
//	img := testimage.Busybox(t, reg, &testimage.Options{Glibc: true})
//	cfg := map[string]any{"image": img.Ref} // pinned: REPO@sha256:...
//
// Busybox builds and pushes in one call and returns both the pinned and the
// tag reference; Options.Glibc adds the host's glibc for libc detection.
package testimage

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berthdev/berth/internal/testenv"
)

// BusyboxPath is where Debian's busybox-static package installs its binary.
const BusyboxPath = "/bin/busybox"

// defaultApplets is used when the host's busybox cannot list its applets.
var defaultApplets = []string{
	"sh", "ash", "echo", "cat", "sleep", "uname", "ls", "mkdir", "env", "kill",
	"ps", "setsid", "id", "true", "false", "hostname", "head", "tail", "tr",
	"grep", "sed", "awk", "rm", "cp", "mv", "touch", "wc", "test", "[", "printf",
	"pwd", "readlink", "stat", "sort", "cut", "xargs", "find", "chmod", "ln",
	"date", "whoami", "timeout", "pidof", "killall", "nproc", "seq", "yes",
}

// Image is a test image pushed to a loopback registry.
type Image struct {
	// Repo is the repository, "127.0.0.1:PORT/berth/busybox".
	Repo string
	// Ref is the pinned reference, "REPO@sha256:...".
	Ref string
	// TagRef is the mutable reference, "REPO:TAG".
	TagRef string
	// Digest is the manifest digest, "sha256:...".
	Digest string
	// Image is the image itself.
	Image v1.Image
}

// Options tunes Busybox. The zero value (or nil) is the defaults.
type Options struct {
	// Repo is the repository path inside the registry; default "berth/busybox".
	Repo string
	// Tag is the tag pushed along with the digest; default "latest".
	Tag string
	// Labels are added to the image config. A random "berth.test.nonce"
	// label is always added, so that every call makes a distinct image ID
	// (tests that remove their images never remove another test's image);
	// the busybox layer itself is shared.
	Labels map[string]string
	// Files are extra regular files (path to content) put in a second layer.
	Files map[string]string
	// Glibc adds a layer with the host's glibc (loader and libc.so.6) and
	// bash, getconf and ldd linked against it, so that libc detection finds
	// glibc ("getconf GNU_LIBC_VERSION", "ldd --version"). The host must be
	// a glibc system; busybox stays the provider of sh and the other tools.
	Glibc bool
	// Programs are more host programs (absolute paths, "/usr/bin/git")
	// put into the glibc layer with every shared library ldd reports for
	// them; they imply Glibc.
	Programs []string
}

var (
	layerOnce sync.Once
	layer     v1.Layer
	layerErr  error
)

// busyboxLayer builds (once per process) the layer holding /bin/busybox and
// its applet links.
func busyboxLayer() (v1.Layer, error) {
	layerOnce.Do(func() {
		bin, err := os.ReadFile(BusyboxPath)
		if err != nil {
			layerErr = fmt.Errorf("testimage: %w", err)
			return
		}
		applets := hostApplets()
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		mt := time.Unix(0, 0)
		dirs := []string{"bin/", "etc/", "tmp/", "root/", "proc/", "sys/", "dev/", "usr/", "usr/bin/", "var/", "var/tmp/"}
		for _, d := range dirs {
			mode := int64(0o755)
			if d == "tmp/" || d == "var/tmp/" {
				mode = 0o1777
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: mt}); err != nil {
				layerErr = err
				return
			}
		}
		files := map[string]string{
			"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
			"etc/group":    "root:x:0:\nnogroup:x:65534:\n",
			"etc/hostname": "berth\n",
		}
		for _, p := range sortedKeys(files) {
			if err := writeFile(tw, p, []byte(files[p]), 0o644, mt); err != nil {
				layerErr = err
				return
			}
		}
		if err := writeFile(tw, "bin/busybox", bin, 0o755, mt); err != nil {
			layerErr = err
			return
		}
		for _, a := range applets {
			if a == "busybox" || strings.Contains(a, "/") {
				continue
			}
			h := &tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: mt}
			if err := tw.WriteHeader(h); err != nil {
				layerErr = err
				return
			}
		}
		if err := tw.Close(); err != nil {
			layerErr = err
			return
		}
		data := buf.Bytes()
		layer, layerErr = tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		})
	})
	return layer, layerErr
}

// hostApplets asks the host's (static, amd64) busybox for its applet list.
func hostApplets() []string {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return defaultApplets
	}
	var list []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			list = append(list, l)
		}
	}
	if len(list) == 0 {
		return defaultApplets
	}
	return list
}

func writeFile(tw *tar.Writer, path string, data []byte, mode int64, mt time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode, Size: int64(len(data)), ModTime: mt}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Build returns a linux/amd64 busybox image (not pushed). It returns an
// error when the host has no busybox-static binary.
func Build(opts *Options) (v1.Image, error) {
	if opts == nil {
		opts = &Options{}
	}
	l, err := busyboxLayer()
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	if opts.Glibc || len(opts.Programs) > 0 {
		gl, err := glibcLayer(opts.Programs...)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, gl); err != nil {
			return nil, err
		}
	}
	if len(opts.Files) > 0 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, p := range sortedKeys(opts.Files) {
			if err := writeFile(tw, strings.TrimPrefix(p, "/"), []byte(opts.Files[p]), 0o644, time.Unix(0, 0)); err != nil {
				return nil, err
			}
		}
		if err := tw.Close(); err != nil {
			return nil, err
		}
		data := buf.Bytes()
		extra, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, extra); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.Cmd = []string{"sh"}
	cf.Config.Labels = map[string]string{"berth.test.nonce": nonce()}
	for k, v := range opts.Labels {
		cf.Config.Labels[k] = v
	}
	return mutate.ConfigFile(img, cf)
}

func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Busybox builds a busybox image and pushes it to reg under opts.Repo and
// opts.Tag. A host without busybox-static ends the test through
// testenv.Missing; a push failure fails it.
func Busybox(t testing.TB, reg *testenv.Registry, opts *Options) Image {
	t.Helper()
	if _, err := os.Stat(BusyboxPath); err != nil {
		testenv.Missing(t, "busybox-static", "apt-get install busybox-static (make test installs it)", err)
	}
	img, err := Build(opts)
	if err != nil {
		if opts != nil && (opts.Glibc || len(opts.Programs) > 0) {
			testenv.Missing(t, "host glibc files", "run on a glibc distribution with bash and getconf (Debian: libc-bin)", err)
		}
		t.Fatalf("testimage: build: %v", err)
	}
	return Push(t, reg, opts, img)
}

// Push pushes img to reg under opts.Repo:opts.Tag (defaults as in Options)
// and returns its references. It fails the test on error.
func Push(t testing.TB, reg *testenv.Registry, opts *Options, img v1.Image) Image {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	repo, tag := opts.Repo, opts.Tag
	if repo == "" {
		repo = "berth/busybox"
	}
	if tag == "" {
		tag = "latest"
	}
	full := reg.Host + "/" + repo
	ref, err := name.NewTag(full+":"+tag, name.Insecure)
	if err != nil {
		t.Fatalf("testimage: %v", err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("testimage: push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatalf("testimage: digest: %v", err)
	}
	return Image{Repo: full, Ref: full + "@" + d.String(), TagRef: full + ":" + tag, Digest: d.String(), Image: img}
}
