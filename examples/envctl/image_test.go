package main

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth/internal/testenv"
)

// TestImagePin pins tags on the in-process registry (IMG-2): a tag to the
// digest that was pushed, a re-pushed tag to the new digest, an index to the
// requested platform's manifest, and a missing tag to an error naming it.
func TestImagePin(t *testing.T) {
	t.Parallel()
	reg := testenv.StartRegistry(t, nil)
	c := newCLI(t)
	repo := reg.Host + "/berth/tools"

	first := pushImage(t, repo+":v1", v1.Platform{OS: "linux", Architecture: "amd64"})
	if out := strings.TrimSpace(c.ok("image", "pin", repo+":v1")); out != repo+"@"+first {
		t.Errorf("image pin %s:v1 = %q, want %s@%s", repo, out, repo, first)
	}
	second := pushImage(t, repo+":v1", v1.Platform{OS: "linux", Architecture: "amd64"})
	if out := strings.TrimSpace(c.ok("image", "pin", repo+":v1", "--insecure-registry", reg.Host)); out != repo+"@"+second || second == first {
		t.Errorf("after a second push image pin = %q, want %s@%s (first was %s)", out, repo, second, first)
	}
	// The digest reference stays pinned to the first image.
	if out := strings.TrimSpace(c.ok("image", "pin", repo+"@"+first)); out != repo+"@"+first {
		t.Errorf("image pin of a digest = %q, want it unchanged", out)
	}

	idxDigest, arm := pushIndex(t, repo+":multi")
	var got pinned
	c.okJSON(&got, "image", "pin", repo+":multi", "--platform", "linux/aarch64")
	if got.Identity != repo+"@"+arm || got.Index != idxDigest || got.Platform == nil || got.Platform.Architecture != "arm64" {
		t.Errorf("image pin --platform linux/aarch64 of an index: %+v; want %s@%s from index %s", got, repo, arm, idxDigest)
	}

	_, msg := c.fail("image", "pin", repo+":missing")
	wantContains(t, "missing tag", msg, repo+":missing", "not found")
	_, msg = c.fail("image", "pin", repo+":v1", "--platform", "linux")
	wantContains(t, "bad platform", msg, "--platform", `"linux"`)
}

// pushImage pushes a random image declaring p to ref and returns its digest.
func pushImage(t *testing.T, ref string, p v1.Platform) string {
	t.Helper()
	img := randomImage(t, p)
	if err := remote.Write(mustRef(t, ref), img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return digest(t, img)
}

// pushIndex pushes an amd64+arm64 index to ref and returns the index digest
// and the arm64 manifest's digest.
func pushIndex(t *testing.T, ref string) (index, arm string) {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}} {
		img := randomImage(t, p)
		if p.Architecture == "arm64" {
			arm = digest(t, img)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	if err := remote.WriteIndex(mustRef(t, ref), idx); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	return digest(t, idx), arm
}

func randomImage(t *testing.T, p v1.Platform) v1.Image {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

func digest(t *testing.T, d interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
