package testimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// glibcPrograms are the host programs copied into a glibc image, with every
// shared library ldd reports for them: bash (for ldd, a bash script),
// getconf (GNU_LIBC_VERSION) and ldd itself.
var glibcPrograms = []string{"/bin/bash", "/usr/bin/getconf"}

// glibcLayer returns a layer with the host's glibc loader and libc, bash,
// getconf and ldd, and the programs extra, at the paths the host uses
// (symlinks resolved to regular files). It fails when the host is not a
// glibc system or lacks one of the programs.
func glibcLayer(extra ...string) (v1.Layer, error) {
	files := map[string]string{"/usr/bin/ldd": "/usr/bin/ldd"} // image path -> host file
	for _, p := range append(slices.Clone(glibcPrograms), extra...) {
		files[p] = p
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			return nil, fmt.Errorf("testimage: ldd %s: %w", p, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				files[f[2]] = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				files[f[0]] = f[0]
			}
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, p := range paths {
		data, err := os.ReadFile(files[p])
		if err != nil {
			return nil, fmt.Errorf("testimage: %w", err)
		}
		var parents []string
		for d := path.Dir(p); d != "/" && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(parents[i], "/") + "/", Mode: 0o755, ModTime: mt}); err != nil {
				return nil, err
			}
		}
		if err := writeFile(tw, strings.TrimPrefix(p, "/"), data, 0o755, mt); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
