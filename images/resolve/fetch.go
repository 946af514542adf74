package resolve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/berthdev/berth/images"
)

// maxIndexDepth bounds nested indexes (an index whose platform entry is
// itself an index).
const maxIndexDepth = 3

// manifest is what one registry lookup tells about a reference.
type manifest struct {
	digest    string
	mediaType types.MediaType
	raw       []byte // the body, when it was fetched with GET
}

// fetch does one uncached resolution.
func (r *Resolver) fetch(ctx context.Context, ref images.Reference, platform v1.Platform) (Result, error) {
	quoted := ref.String()
	var opts []name.Option
	if registry, _, _ := strings.Cut(ref.Repository(), "/"); r.plainHTTPAllowed(registry) {
		opts = append(opts, name.Insecure)
	}
	nref, err := name.ParseReference(quoted, opts...)
	if ref.Repository() == "" || err != nil {
		return Result{}, fmt.Errorf("resolve %q: %w", quoted, errNotRegistry)
	}
	puller, err := remote.NewPuller(remote.WithTransport(r.rt), remote.WithAuthFromKeychain(r.kc))
	if err != nil {
		return Result{}, fmt.Errorf("resolve %q: %w: %v", quoted, errRegistry, err)
	}

	m, err := r.lookup(ctx, puller, nref)
	if err != nil {
		return Result{}, classify(quoted, err)
	}
	var res Result
	for depth := 0; m.mediaType.IsIndex(); depth++ {
		if depth == maxIndexDepth {
			return Result{}, fmt.Errorf("resolve %q: %w: indexes nested deeper than %d", quoted, errRegistry, maxIndexDepth)
		}
		if res.Index == "" {
			res.Index = m.digest
		}
		child, err := r.pickPlatform(ctx, puller, nref, m, platform)
		if err != nil {
			return Result{}, classify(quoted, err)
		}
		res.Platform = *child.Platform
		m = manifest{digest: child.Digest.String(), mediaType: child.MediaType}
	}
	if !m.mediaType.IsImage() {
		return Result{}, fmt.Errorf("resolve %q: %w: media type %q is not an image manifest", quoted, errRegistry, m.mediaType)
	}
	id, err := images.DigestIdentity(ref.Repository(), m.digest)
	if err != nil {
		return Result{}, fmt.Errorf("resolve %q: %w: %v", quoted, errRegistry, err)
	}
	res.Identity = id
	return res, nil
}

// lookup learns the digest and media type of ref: HEAD first, GET when the
// registry does not answer HEAD usefully (some refuse it, some omit the
// digest header).
func (r *Resolver) lookup(ctx context.Context, p *remote.Puller, ref name.Reference) (manifest, error) {
	desc, err := p.Head(ctx, ref)
	if err == nil {
		return manifest{digest: desc.Digest.String(), mediaType: desc.MediaType}, nil
	}
	if ctx.Err() != nil || errors.Is(err, errInsecureRegistry) {
		return manifest{}, err
	}
	r.log.DebugContext(ctx, "resolve: HEAD failed, falling back to GET", "ref", ref.String(), "err", err)
	d, err := p.Get(ctx, ref)
	if err != nil {
		return manifest{}, err
	}
	return manifest{digest: d.Digest.String(), mediaType: d.MediaType, raw: d.Manifest}, nil
}

// pickPlatform reads index m (fetching its body by digest when the HEAD
// did not bring it) and returns the first entry whose platform satisfies
// want.
func (r *Resolver) pickPlatform(ctx context.Context, p *remote.Puller, ref name.Reference, m manifest, want v1.Platform) (v1.Descriptor, error) {
	raw := m.raw
	if raw == nil {
		d, err := p.Get(ctx, ref.Context().Digest(m.digest))
		if err != nil {
			return v1.Descriptor{}, err
		}
		raw = d.Manifest
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%w: index %s: %v", errRegistry, m.digest, err)
	}
	var have []string
	for _, d := range idx.Manifests {
		if d.Platform == nil {
			continue
		}
		if platformMatches(*d.Platform, want) {
			return d, nil
		}
		have = append(have, d.Platform.String())
	}
	return v1.Descriptor{}, fmt.Errorf("%w: want %s, index %s has [%s]", errNoPlatform, want.String(), m.digest, strings.Join(have, " "))
}

// platformMatches reports whether have satisfies want: same OS and
// architecture, and the same variant when want names one (arm64 "v8" is
// arm64's default variant).
func platformMatches(have, want v1.Platform) bool {
	if have.OS != want.OS || have.Architecture != want.Architecture {
		return false
	}
	if want.Variant == "" {
		return true
	}
	hv, wv := have.Variant, want.Variant
	if want.Architecture == "arm64" {
		if hv == "" {
			hv = "v8"
		}
		if wv == "" {
			wv = "v8"
		}
	}
	return hv == wv
}

// classify wraps err with the sentinel of the resolver's contract.
func classify(quoted string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("resolve %q: %w", quoted, err)
	}
	for _, s := range []error{errInsecureRegistry, errNoPlatform, errNotFound, errDenied, errRegistry} {
		if errors.Is(err, s) {
			return fmt.Errorf("resolve %q: %w", quoted, err)
		}
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("resolve %q: %w: %v", quoted, errNotFound, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("resolve %q: %w: %v", quoted, errDenied, err)
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return fmt.Errorf("resolve %q: %w: %v", quoted, errNotFound, err)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return fmt.Errorf("resolve %q: %w: %v", quoted, errDenied, err)
			}
		}
	}
	return fmt.Errorf("resolve %q: %w: %v", quoted, errRegistry, err)
}

// plainHTTPAllowed reports whether host ("host[:port]") may be reached over
// plain HTTP: loopback hosts, and hosts listed in InsecureRegistries.
func (r *Resolver) plainHTTPAllowed(host string) bool {
	if r.insecure[host] {
		return true
	}
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if r.insecure[h] {
		return true
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// httpGuard refuses plain-HTTP requests to hosts that may not be reached
// that way, whatever go-containerregistry's scheme fallback would try.
type httpGuard struct {
	next    http.RoundTripper
	allowed func(host string) bool
}

// RoundTrip refuses a disallowed plain-HTTP request, else passes it on.
func (g *httpGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !g.allowed(req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%w: http://%s (list it in Options.InsecureRegistries to allow)", errInsecureRegistry, req.URL.Host)
	}
	return g.next.RoundTrip(req)
}
