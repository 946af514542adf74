package testimage_test

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

func TestBusyboxIsPushedByDigestAndDistinct(t *testing.T) {
	t.Parallel()
	reg := testenv.StartRegistry(t, nil)
	a := testimage.Busybox(t, reg, nil)
	b := testimage.Busybox(t, reg, &testimage.Options{Tag: "other"})
	if a.Digest == b.Digest {
		t.Fatalf("two builds share digest %s; each call must make a distinct image", a.Digest)
	}
	ref, err := name.NewDigest(a.Ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("pull back %s: %v", a.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !slices.Equal(cf.Config.Cmd, []string{"sh"}) {
		t.Errorf("config = %s/%s cmd %q, want linux/amd64 cmd [sh]", cf.OS, cf.Architecture, cf.Config.Cmd)
	}
	tagRef, err := name.ParseReference(a.TagRef, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	tagged, err := remote.Head(tagRef)
	if err != nil {
		t.Fatal(err)
	}
	if tagged.Digest.String() != a.Digest {
		t.Errorf("tag %s points at %s, want %s", a.TagRef, tagged.Digest, a.Digest)
	}
}

// The engine pulls the test image from the loopback registry by digest
// (127.0.0.0/8 is an insecure registry by default).
func TestEnginePullsByDigest(t *testing.T) {
	t.Parallel()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	testenv.RemoveImageAtCleanup(t, cli, img.Ref)
	ctx := context.Background()
	rc, err := cli.ImagePull(ctx, img.Ref, image.PullOptions{})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if m.Error != "" {
			t.Fatalf("pull: %s", m.Error)
		}
	}
	rc.Close()
	ins, err := cli.ImageInspect(ctx, img.Ref)
	if err != nil {
		t.Fatalf("inspect %s: %v", img.Ref, err)
	}
	if !slices.Contains(ins.RepoDigests, img.Ref) {
		t.Errorf("RepoDigests = %q, want it to hold %s", ins.RepoDigests, img.Ref)
	}
}
