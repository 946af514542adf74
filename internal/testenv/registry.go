package testenv

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Registry is go-containerregistry's in-process OCI registry listening on
// 127.0.0.1. The Docker engine treats 127.0.0.0/8 registries as insecure, so
// it can pull from it by digest over plain HTTP.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry part of references.
	Host string
	// URL is "http://127.0.0.1:PORT".
	URL string

	srv      *httptest.Server
	requests atomic.Int64
	heads    atomic.Int64
	gets     atomic.Int64
}

// StartRegistry starts a registry for the test and stops it at cleanup. wrap,
// if not nil, wraps the registry's handler (for counting or failing
// requests); the Registry counts requests itself as well.
func StartRegistry(t testing.TB, wrap func(http.Handler) http.Handler) *Registry {
	t.Helper()
	r := &Registry{}
	var h http.Handler = registry.New(registry.Logger(discardLogger()))
	if wrap != nil {
		h = wrap(h)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "/manifests/") {
			switch req.Method {
			case http.MethodHead:
				r.heads.Add(1)
			case http.MethodGet:
				r.gets.Add(1)
			}
		}
		r.requests.Add(1)
		inner.ServeHTTP(w, req)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: registry listen: %v", err)
	}
	r.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	r.URL = r.srv.URL
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// Requests returns the number of HTTP requests served so far.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// ManifestHeads returns the number of HEAD requests for manifests so far.
func (r *Registry) ManifestHeads() int64 { return r.heads.Load() }

// ManifestGets returns the number of GET requests for manifests so far.
func (r *Registry) ManifestGets() int64 { return r.gets.Load() }
