package kubecluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pausePackage is the sandbox container's program.
const pausePackage = "github.com/berthdev/berth/internal/testenv/kubecluster/internal/pause"

// buildPause builds the static pause program, packs it as the sandbox
// image and imports it into the cluster's containerd once it answers (the
// caller waits for that before reading the error).
func (c *Cluster) buildPause(ctx context.Context) error {
	bin := c.dir.path("pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pausePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pausePackage, err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := FileImage(map[string][]byte{"pause": prog}, []string{"/pause"})
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "containerd to answer", func() (bool, error) {
		_, err := run(ctx, "ctr", "--address", c.dir.socket(), "version")
		return err == nil, nil
	}); err != nil {
		return err
	}
	return c.ImportImage(ctx, pauseImage, img)
}

// FileImage returns a single-layer image of this machine's platform
// holding files (path relative to /, content; mode 0755) with entrypoint,
// for a static program to be a whole image.
func FileImage(files map[string][]byte, entrypoint []string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = entrypoint
	return mutate.ConfigFile(img, cfg)
}

// ImportImage imports img into the cluster's containerd, in the namespace
// the kubelet uses (k8s.io), named ref (a tag, "example.test/x:1") and
// ref's repository @ img's digest ("example.test/x@sha256:..."). A pod then
// runs it by either name with imagePullPolicy Never or IfNotPresent. It
// fails when containerd refuses the image.
func (c *Cluster) ImportImage(ctx context.Context, ref string, img v1.Image) error {
	dir, err := os.MkdirTemp(c.dir.base, "image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := ocilayout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		return err
	}
	// Two names for the one manifest: ref, and its repository @ the
	// digest (the kubelet asks containerd's CRI for an image by digest
	// under that name, which only a pull would have recorded otherwise).
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	repo := ref
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	for _, n := range []string{ref, repo + "@" + digest.String()} {
		if err := p.AppendImage(img, ocilayout.WithAnnotations(map[string]string{"io.containerd.image.name": n})); err != nil {
			return err
		}
	}
	archive := filepath.Join(dir, "image.tar")
	if err := tarDir(filepath.Join(dir, "oci"), archive); err != nil {
		return err
	}
	if _, err := run(ctx, "ctr", "--address", c.dir.socket(), "-n", "k8s.io", "images", "import", archive); err != nil {
		return fmt.Errorf("import %s into the cluster's containerd: %w", ref, err)
	}
	return nil
}

// tarDir writes the files under dir into a tar archive at out, named
// relative to dir.
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
