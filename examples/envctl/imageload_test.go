package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// envctl image load puts an image saved with `docker save` into a Docker
// engine that reaches no registry, under a pinned reference; a Docker
// environment with that reference then runs it and qualifies, with no
// registry anywhere (the command's own one is gone). An archive that is
// not one is refused, naming the file.
func TestImageLoadPutsASavedImageIntoTheEngine(t *testing.T) {
	t.Parallel()
	dc := testenv.Docker(t)
	img, err := testimage.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "agent.tar")
	if err := tarball.WriteToFile(archive, name.MustParseReference("example.test/agent:1").(name.Tag), img); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	var got loadedImage
	c.okJSON(&got, "image", "load", archive)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = dc.ImageRemove(ctx, got.Reference, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	if !strings.HasPrefix(got.Reference, "127.0.0.1:") || !strings.HasSuffix(got.Reference, "/agent@"+digest.String()) || got.Digest != digest.String() {
		t.Fatalf("image load = %+v, want 127.0.0.1:PORT/agent@%s", got, digest)
	}
	info, err := dc.ImageInspect(t.Context(), got.Reference)
	if err != nil || !slices.Contains(info.RepoDigests, got.Reference) {
		t.Fatalf("the engine's copy of %s: repo digests %v, %v", got.Reference, info.RepoDigests, err)
	}

	mb := make([]byte, 6)
	_, _ = rand.Read(mb)
	mark := hex.EncodeToString(mb)
	testenv.RemoveContainersAtCleanup(t, dc, "test.berth/imageload", mark)
	c.ok("env", "create", "--name", "loaded", "--driver", "docker", "--config",
		writeFile(t, `{"image":"`+got.Reference+`","labels":{"test.berth/imageload":"`+mark+`"}}`))
	var res probejson.Result
	c.okJSON(&res, "probe", "loaded", "--company", "acme")
	if !res.OK || !res.PlatformQualificationRecorded {
		t.Errorf("a probe of the loaded image: ok=%t recorded=%t diag=%v", res.OK, res.PlatformQualificationRecorded, res.QualificationDiagnostic)
	}

	notTar := filepath.Join(t.TempDir(), "notes.tar")
	if err := os.WriteFile(notTar, []byte("not an archive"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.exec("", "image", "load", notTar); err == nil || !strings.Contains(err.Error(), notTar) || !strings.Contains(err.Error(), "not an archive of `docker save`") {
		t.Errorf("image load of a file that is no archive: %v", err)
	}
}
