package resolve_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/images/resolve"
)

// inMemory is an http.RoundTripper that serves every request from an
// in-process registry: no socket, no network.
type inMemory struct{ h http.Handler }

func (t inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	sr := r.Clone(r.Context()) // as a server receives it
	if sr.Body == nil {
		sr.Body = http.NoBody
	}
	sr.RequestURI = r.URL.RequestURI()
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, sr)
	resp := w.Result()
	resp.Request = r
	return resp, nil
}

// An operator types a tag; the host pins it to the digest of the image
// for the target's platform before saving it, so that it can qualify. Pin
// picks the platform's manifest out of a multi-platform index. Here the
// registry is an in-process one reached through Options.Transport (a host
// passes its keychain and leaves the transport alone).
func ExampleResolver_Pin() {
	ctx := context.Background()
	tr := inMemory{registry.New(registry.Logger(log.New(io.Discard, "", 0)))}

	// Push a two-platform index as registry.example/acme/agent:1.2.
	var adds []mutate.IndexAddendum
	digests := map[string]string{}
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}} {
		img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: p.OS, Architecture: p.Architecture})
		if err != nil {
			panic(err)
		}
		d, err := img.Digest()
		if err != nil {
			panic(err)
		}
		digests[p.Architecture] = d.String()
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	tag := name.MustParseReference("registry.example/acme/agent:1.2")
	if err := remote.WriteIndex(tag, mutate.AppendManifests(empty.Index, adds...), remote.WithTransport(tr)); err != nil {
		panic(err)
	}

	r := resolve.New(&resolve.Options{Transport: tr})
	ref := images.MustParseReference("registry.example/acme/agent:1.2")
	platform, err := resolve.ParsePlatform("linux/aarch64")
	if err != nil {
		panic(err)
	}
	id, err := r.Pin(ctx, ref, platform)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, pinned := id.Reference().Identity()
	fmt.Println(id.Reference().Kind(), pinned, id.Digest() == digests["arm64"])

	_, err = r.Pin(ctx, images.MustParseReference("registry.example/acme/agent:9.9"), platform)
	fmt.Println(errcode.Code(err))

	// A provider snapshot is no registry reference: refused without a request.
	_, err = r.Pin(ctx, images.MustParseReference("snapshot:daytona/snap-42"), platform)
	fmt.Println(errcode.Code(err))
	// Output:
	// digest true true
	// not_found
	// unsupported
}

// ParsePlatform reads a platform as a flag gives it, through the one alias
// table of package qualification.
func ExampleParsePlatform() {
	for _, s := range []string{"linux/arm64", "linux/x86_64", "linux/armv7l", "linux"} {
		p, err := resolve.ParsePlatform(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(p.String())
	}
	// Output:
	// linux/arm64
	// linux/amd64
	// linux/arm/v7
	// resolve: platform "linux": want os/arch[/variant]: qualification: invalid platform "linux": want <os>/<arch>[/<variant>]
}
