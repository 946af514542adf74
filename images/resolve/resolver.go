package resolve

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
)

// The causes of the resolver's errors. Every error returned by Resolve and
// Pin wraps one of these (or a context error) and names the reference;
// errcode.Code tells them apart by their codes.
var (
	// errNotFound: the registry has no such repository, tag or digest.
	errNotFound = errcode.New(errcode.NotFound, "resolve: image not found")
	// errDenied: the registry refused the credentials (HTTP 401 / 403).
	errDenied = errcode.New(errcode.AuthFailed, "resolve: registry denied access")
	// errNoPlatform: the reference names a multi-platform index without a
	// manifest for the requested platform.
	errNoPlatform = errcode.New(errcode.Unsupported, "resolve: no manifest for the requested platform")
	// errInsecureRegistry: the registry would be reached over plain HTTP,
	// which is allowed only for loopback registries and for registries the
	// host listed in Options.InsecureRegistries.
	errInsecureRegistry = errcode.New(errcode.Invalid, "resolve: plain HTTP registry not allowed")
	// errNotRegistry: the reference is not an OCI registry reference (a
	// provider snapshot or the zero Reference); its provider verifies it.
	errNotRegistry = errcode.New(errcode.Unsupported, "resolve: not a registry reference")
	// errInvalidPlatform: the requested platform lacks an OS or architecture.
	errInvalidPlatform = errcode.New(errcode.Invalid, "resolve: invalid platform")
	// errRegistry: any other registry or network failure.
	errRegistry = errcode.New(errcode.Unavailable, "resolve: registry request failed")
)

// defaultTTL is how long a resolved tag is cached when Options.TTL is 0.
const defaultTTL = 5 * time.Minute

// defaultPlatform returns the platform resolved when the caller passes the
// zero v1.Platform: linux/amd64. Each call returns a fresh value.
func defaultPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: "amd64"} }

// Options configure a Resolver. The zero value (or nil) means defaults.
type Options struct {
	// Keychain supplies registry credentials. Default: anonymous access.
	// The host supplies its own keychain; credentials never appear in errors.
	Keychain authn.Keychain
	// Transport carries the registry requests. Default: remote.DefaultTransport.
	// Whatever it is, plain-HTTP requests to hosts that are neither loopback
	// nor listed in InsecureRegistries are refused before they reach it.
	Transport http.RoundTripper
	// TTL is how long a resolution is cached. 0 means 5 minutes; a negative
	// TTL disables the cache (concurrent pins are still coalesced).
	TTL time.Duration
	// InsecureRegistries lists registry hosts ("host:port") that may be
	// reached over plain HTTP. Loopback registries (127.0.0.0/8, ::1,
	// localhost) always may. Default: none.
	InsecureRegistries []string
	// Logger receives debug records of registry requests. Default: discard.
	Logger *slog.Logger

	// clock tells the time for cache expiry; set by this package's tests.
	// Default: the wall clock.
	clock clock.Clock
}

// Result is one resolution.
type Result struct {
	// Identity is repo@sha256:<hex> of the image manifest for the platform.
	Identity images.Identity
	// Index is the digest of the multi-platform index the manifest was
	// chosen from, or "" when the reference named an image manifest.
	Index string
	// Platform is the platform of the chosen manifest as the index declares
	// it; the zero value when the reference named an image manifest.
	Platform v1.Platform
}

// Resolver pins image references to digests (IMG-2). It caches results for a
// TTL and coalesces concurrent resolutions of one reference and platform into
// one registry request. A Resolver is safe for concurrent use.
type Resolver struct {
	kc       authn.Keychain
	rt       http.RoundTripper
	clk      clock.Clock
	ttl      time.Duration
	insecure map[string]bool
	log      *slog.Logger

	mu      sync.Mutex
	cache   map[key]entry
	flights map[key]*flight

	// onJoin, if set (tests only), is called with the lock held after a
	// caller joined a flight, with the number of its waiters.
	onJoin func(waiters int)
}

type key struct {
	ref      string // normalized reference
	platform string // v1.Platform.String()
}

type entry struct {
	res     Result
	expires time.Time
}

// flight is one registry resolution shared by every caller waiting for it.
// It is cancelled when the last waiter gives up.
type flight struct {
	done    chan struct{}
	res     Result
	err     error
	waiters int
	cancel  context.CancelFunc
}

// New returns a Resolver. opts may be nil.
func New(opts *Options) *Resolver {
	if opts == nil {
		opts = &Options{}
	}
	r := &Resolver{
		kc:       opts.Keychain,
		rt:       opts.Transport,
		clk:      opts.clock,
		ttl:      opts.TTL,
		insecure: map[string]bool{},
		log:      opts.Logger,
		cache:    map[key]entry{},
		flights:  map[key]*flight{},
	}
	if r.kc == nil {
		r.kc = anonymous{}
	}
	if r.rt == nil {
		r.rt = remote.DefaultTransport
	}
	if r.clk == nil {
		r.clk = clock.Real{}
	}
	if r.ttl == 0 {
		r.ttl = defaultTTL
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for _, h := range opts.InsecureRegistries {
		r.insecure[h] = true
	}
	r.rt = &httpGuard{next: r.rt, allowed: r.plainHTTPAllowed}
	return r
}

// Pin resolves ref for platform and returns the pinned identity
// repo@sha256:<hex> (IMG-2). See Resolve.
func (r *Resolver) Pin(ctx context.Context, ref images.Reference, platform v1.Platform) (images.Identity, error) {
	res, err := r.Resolve(ctx, ref, platform)
	return res.Identity, err
}

// Resolve resolves an OCI reference to the digest of the image manifest for
// platform (the zero platform means linux/amd64). A tag is resolved with
// a HEAD request where the registry allows, else a GET; a multi-platform
// index is resolved to the manifest of the platform (os, architecture and,
// when given, variant). A reference to a single-platform image manifest
// resolves to that manifest whatever platform is asked for (the platform
// applies to indexes; a probe measures the real one), so a digest reference
// of an image manifest resolves to itself.
//
// Results are cached for the TTL; concurrent calls for one reference and
// platform share one registry resolution. Resolve returns when ctx is done
// with an error wrapping ctx.Err(); the shared resolution is cancelled once
// no caller waits for it. Errors quote the reference and carry the code
// (errcode.Code) of their cause: NotFound (no such repository, tag or
// digest), AuthFailed (the registry refused the credentials), Unsupported
// (an index without the platform's manifest, or not a registry reference),
// Invalid (a platform without OS or architecture, or a plain-HTTP registry
// that is neither loopback nor in Options.InsecureRegistries), Unavailable
// (any other registry or network failure).
func (r *Resolver) Resolve(ctx context.Context, ref images.Reference, platform v1.Platform) (Result, error) {
	if ref.Repository() == "" {
		return Result{}, fmt.Errorf("resolve %q (%s): %w", ref.String(), cmp.Or(string(ref.Kind()), "none"), errNotRegistry)
	}
	if platform.OS == "" && platform.Architecture == "" {
		platform = defaultPlatform()
	}
	if platform.OS == "" || platform.Architecture == "" {
		return Result{}, fmt.Errorf("resolve %q: %w: %q wants both os and architecture", ref.String(), errInvalidPlatform, platform.String())
	}
	k := key{ref: ref.String(), platform: platform.String()}

	r.mu.Lock()
	if e, ok := r.cache[k]; ok {
		if r.clk.Now().Before(e.expires) {
			r.mu.Unlock()
			return e.res, nil
		}
		delete(r.cache, k)
	}
	f, ok := r.flights[k]
	if !ok {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		r.flights[k] = f
		go r.run(fctx, k, f, ref, platform)
	}
	f.waiters++
	if r.onJoin != nil {
		r.onJoin(f.waiters)
	}
	r.mu.Unlock()

	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		r.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
			if r.flights[k] == f {
				delete(r.flights, k)
			}
		}
		r.mu.Unlock()
		return Result{}, fmt.Errorf("resolve %q: %w", ref.String(), ctx.Err())
	}
}

func (r *Resolver) run(ctx context.Context, k key, f *flight, ref images.Reference, platform v1.Platform) {
	defer f.cancel()
	res, err := r.fetch(ctx, ref, platform)
	r.mu.Lock()
	if r.flights[k] == f {
		delete(r.flights, k)
	}
	if err == nil && r.ttl > 0 && ctx.Err() == nil {
		r.pruneLocked()
		r.cache[k] = entry{res: res, expires: r.clk.Now().Add(r.ttl)}
	}
	f.res, f.err = res, err
	r.mu.Unlock()
	close(f.done)
}

// maxEntries bounds the cache. When it is full, expired entries go first,
// then arbitrary ones: the cache is an optimization, never the truth.
const maxEntries = 4096

func (r *Resolver) pruneLocked() {
	if len(r.cache) < maxEntries {
		return
	}
	now := r.clk.Now()
	for k, e := range r.cache {
		if !now.Before(e.expires) {
			delete(r.cache, k)
		}
	}
	for k := range r.cache {
		if len(r.cache) < maxEntries {
			break
		}
		delete(r.cache, k)
	}
}

// Invalidate forgets the cached resolutions of ref for every platform, so
// that the next Resolve asks the registry again (for example after a push).
func (r *Resolver) Invalidate(ref images.Reference) {
	s := ref.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.cache {
		if k.ref == s {
			delete(r.cache, k)
		}
	}
}

// anonymous is the default keychain: no credentials for any registry.
type anonymous struct{}

// Resolve returns authn.Anonymous for every registry.
func (anonymous) Resolve(authn.Resource) (authn.Authenticator, error) { return authn.Anonymous, nil }
