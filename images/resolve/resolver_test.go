package resolve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testenv"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
	armv7 = v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}
)

// randomImage builds a small random image whose config declares p.
func randomImage(t testing.TB, p v1.Platform) v1.Image {
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
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t testing.TB, d interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// push writes img to ref on the test registry and returns its digest.
func push(t testing.TB, ref string, img v1.Image) string {
	t.Helper()
	if err := remote.Write(mustName(t, ref), img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return digestOf(t, img)
}

// pushIndex writes a multi-platform index of one random image per platform
// and returns the index digest and each platform's manifest digest.
func pushIndex(t *testing.T, ref string, platforms ...v1.Platform) (string, map[string]string) {
	t.Helper()
	var adds []mutate.IndexAddendum
	digests := map[string]string{}
	for _, p := range platforms {
		img := randomImage(t, p)
		digests[p.String()] = digestOf(t, img)
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	if err := remote.WriteIndex(mustName(t, ref), idx); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	return digestOf(t, idx), digests
}

func mustName(t testing.TB, s string) name.Reference {
	t.Helper()
	n, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func manifestRequests(reg *testenv.Registry) int64 { return reg.ManifestHeads() + reg.ManifestGets() }

// IMG-2: a tag pushed twice resolves to the new digest once the cached
// answer expired or was invalidated, while the digest reference stays.
func TestTagPushedTwiceResolvesToNewDigest(t *testing.T) {
	t.Parallel()
	reg := testenv.StartRegistry(t, nil)
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := New(&Options{clock: clk, TTL: time.Minute})
	ctx := context.Background()
	tag := images.MustParseReference(reg.Host + "/team/app:v1")

	first := push(t, tag.String(), randomImage(t, amd64))
	got, err := r.Pin(ctx, tag, amd64)
	if err != nil {
		t.Fatal(err)
	}
	want := reg.Host + "/team/app@" + first
	if got.String() != want {
		t.Fatalf("Pin(v1) = %q, want %q", got, want)
	}
	pinned := got.Reference()

	second := push(t, tag.String(), randomImage(t, amd64))
	if got, _ := r.Pin(ctx, tag, amd64); got.Digest() != first {
		t.Errorf("within the TTL Pin(v1) = %s, want the cached %s", got.Digest(), first)
	}
	clk.Advance(time.Minute)
	if got, err := r.Pin(ctx, tag, amd64); err != nil || got.Digest() != second {
		t.Errorf("after the TTL Pin(v1) = %s, %v; want the new %s", got.Digest(), err, second)
	}

	third := push(t, tag.String(), randomImage(t, amd64))
	r.Invalidate(tag)
	if got, err := r.Pin(ctx, tag, amd64); err != nil || got.Digest() != third {
		t.Errorf("after Invalidate Pin(v1) = %s, %v; want %s", got.Digest(), err, third)
	}

	// The digest reference still names the first image.
	if got, err := r.Pin(ctx, pinned, amd64); err != nil || got.String() != want {
		t.Errorf("Pin(%s) = %q, %v; want it unchanged", pinned, got, err)
	}
}

// IMG-2: 100 concurrent pins of one tag make one registry manifest request,
// even with the cache off (they share one flight).
func TestConcurrentPinsMakeOneRequest(t *testing.T) {
	t.Parallel()
	const n = 100
	var armed atomic.Bool
	allJoined := make(chan struct{})
	reg := testenv.StartRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if armed.Load() && strings.Contains(req.URL.Path, "/manifests/") {
				<-allJoined // hold the request until every caller waits on it
			}
			h.ServeHTTP(w, req)
		})
	})
	ref := images.MustParseReference(reg.Host + "/team/app:latest")
	d := push(t, ref.String(), randomImage(t, amd64))
	armed.Store(true)

	r := New(&Options{TTL: -1})
	r.onJoin = func(w int) {
		if w == n {
			close(allJoined)
		}
	}
	before := manifestRequests(reg)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			got, err := r.Pin(context.Background(), ref, amd64)
			if err == nil && got.Digest() != d {
				err = errors.New("wrong digest " + got.Digest())
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := manifestRequests(reg) - before; got != 1 {
		t.Errorf("%d concurrent pins made %d manifest requests, want 1", n, got)
	}
}

// IMG-2: an index resolves to the manifest of the requested platform.
func TestIndexResolvesToRequestedPlatform(t *testing.T) {
	t.Parallel()
	reg := testenv.StartRegistry(t, nil)
	r := New(nil)
	ctx := context.Background()
	ref := images.MustParseReference(reg.Host + "/multi:1.0")
	idxDigest, digests := pushIndex(t, ref.String(), amd64, arm64, armv7)

	tests := []struct {
		name string
		ref  images.Reference
		p    v1.Platform
		want Result
	}{
		{"tag for arm64 gives the arm64 manifest", ref, arm64, Result{
			Identity: images.MustParseIdentity(reg.Host + "/multi@" + digests[arm64.String()]), Index: idxDigest, Platform: arm64}},
		{"tag for amd64 gives the amd64 manifest", ref, amd64, Result{
			Identity: images.MustParseIdentity(reg.Host + "/multi@" + digests[amd64.String()]), Index: idxDigest, Platform: amd64}},
		{"zero platform means linux/amd64", ref, v1.Platform{}, Result{
			Identity: images.MustParseIdentity(reg.Host + "/multi@" + digests[amd64.String()]), Index: idxDigest, Platform: amd64}},
		{"variant is matched", ref, armv7, Result{
			Identity: images.MustParseIdentity(reg.Host + "/multi@" + digests[armv7.String()]), Index: idxDigest, Platform: armv7}},
		{"index digest reference resolves to the platform manifest", mustWithDigest(t, ref, idxDigest), arm64, Result{
			Identity: images.MustParseIdentity(reg.Host + "/multi@" + digests[arm64.String()]), Index: idxDigest, Platform: arm64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := r.Resolve(ctx, tt.ref, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b images.Identity) bool { return a == b })); diff != "" {
				t.Errorf("Resolve(%s, %s) (-want +got):\n%s", tt.ref, tt.p.String(), diff)
			}
		})
	}

	_, err := r.Pin(ctx, ref, v1.Platform{OS: "linux", Architecture: "s390x"})
	if !errors.Is(err, errNoPlatform) || !strings.Contains(err.Error(), `"`+ref.String()+`"`) {
		t.Errorf("Pin for a platform the index lacks: %v, want errNoPlatform naming %q", err, ref)
	}
}

func mustWithDigest(t *testing.T, r images.Reference, d string) images.Reference {
	t.Helper()
	out, err := images.ParseReference(r.Repository() + "@" + d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// IMG-2: a missing tag or repository is errNotFound naming the reference.
func TestMissingIsNotFound(t *testing.T) {
	t.Parallel()
	reg := testenv.StartRegistry(t, nil)
	push(t, reg.Host+"/present:v1", randomImage(t, amd64))
	r := New(nil)
	for _, s := range []string{reg.Host + "/present:nope", reg.Host + "/absent:v1"} {
		ref := images.MustParseReference(s)
		_, err := r.Pin(context.Background(), ref, amd64)
		if !errors.Is(err, errNotFound) {
			t.Errorf("Pin(%s) error = %v, want errNotFound", s, err)
		}
		if err != nil && !strings.Contains(err.Error(), `"`+ref.String()+`"`) {
			t.Errorf("error %q does not name %q", err, ref)
		}
	}
}

// IMG-2: a registry that refuses HEAD is asked with GET.
func TestHeadRefusedFallsBackToGet(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	reg := testenv.StartRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if refuse.Load() && strings.Contains(req.URL.Path, "/manifests/") && req.Method == http.MethodHead {
				http.Error(w, "no HEAD here", http.StatusMethodNotAllowed)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	ref := images.MustParseReference(reg.Host + "/app:v1")
	img := randomImage(t, amd64)
	if err := remote.Write(mustName(t, ref.String()), img); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	heads, gets := reg.ManifestHeads(), reg.ManifestGets()
	got, err := New(nil).Pin(context.Background(), ref, amd64)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest() != digestOf(t, img) {
		t.Errorf("Pin = %s, want %s", got.Digest(), digestOf(t, img))
	}
	if reg.ManifestHeads() == heads {
		t.Error("HEAD was not tried first")
	}
	if reg.ManifestGets() == gets {
		t.Error("no GET was made after HEAD was refused")
	}
}

// Resolve honours ctx: cancelling the only caller cancels the registry
// request and returns a context error.
func TestCancelStopsTheRequest(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	cancelled := make(chan struct{})
	reg := testenv.StartRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.Contains(req.URL.Path, "/manifests/") {
				close(arrived)
				<-req.Context().Done()
				close(cancelled)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err := New(nil).Pin(ctx, images.MustParseReference(reg.Host+"/slow:v1"), amd64)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Pin after cancel: %v, want context.Canceled", err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Error("the registry request was not cancelled")
	}
}

// A caller that gives up does not cancel the resolution another caller
// still waits for.
func TestOneCallerGivingUpLeavesTheOthers(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	release := make(chan struct{})
	reg := testenv.StartRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if armed.Load() && strings.Contains(req.URL.Path, "/manifests/") {
				<-release
			}
			h.ServeHTTP(w, req)
		})
	})
	ref := images.MustParseReference(reg.Host + "/app:v1")
	d := push(t, ref.String(), randomImage(t, amd64))
	armed.Store(true)

	r := New(nil)
	bothJoined := make(chan struct{})
	r.onJoin = func(w int) {
		if w == 2 {
			close(bothJoined)
		}
	}
	quitter, quit := context.WithCancel(context.Background())
	quitErr := make(chan error, 1)
	go func() {
		_, err := r.Pin(quitter, ref, amd64)
		quitErr <- err
	}()
	stayErr := make(chan error, 1)
	var got images.Identity
	go func() {
		var err error
		got, err = r.Pin(context.Background(), ref, amd64)
		stayErr <- err
	}()
	<-bothJoined
	quit()
	if err := <-quitErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the caller that gave up got %v, want context.Canceled", err)
	}
	close(release)
	if err := <-stayErr; err != nil || got.Digest() != d {
		t.Errorf("the caller that stayed got %s, %v; want %s", got.Digest(), err, d)
	}
}

// The cache never grows past its bound.
func TestCacheIsBounded(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	r := New(&Options{clock: clk})
	for i := range maxEntries + 10 {
		r.cache[key{ref: string(rune('a'+i%26)) + time.Duration(i).String()}] = entry{expires: clk.Now().Add(time.Hour)}
		r.pruneLocked()
	}
	if len(r.cache) > maxEntries {
		t.Errorf("cache holds %d entries, bound is %d", len(r.cache), maxEntries)
	}
}
