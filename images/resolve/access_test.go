package resolve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/testenv"
)

type staticKeychain struct{ user, pass string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return authn.FromConfig(authn.AuthConfig{Username: k.user, Password: k.pass}), nil
}

// Credentials come from the host's keychain; a refusal is errDenied and
// never shows the password.
func TestKeychainCredentials(t *testing.T) {
	t.Parallel()
	const user, pass = "robot", "s3cret-pa55word"
	var locked atomic.Bool
	reg := testenv.StartRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			u, p, ok := req.BasicAuth()
			if locked.Load() && (!ok || u != user || p != pass) {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"login"}]}`, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	ref := images.MustParseReference(reg.Host + "/private:v1")
	d := push(t, ref.String(), randomImage(t, amd64))
	locked.Store(true)

	_, err := New(nil).Pin(context.Background(), ref, amd64)
	if !errors.Is(err, errDenied) {
		t.Errorf("anonymous Pin: %v, want errDenied", err)
	}
	bad, err := New(&Options{Keychain: staticKeychain{user, "wrong-" + pass}}).Pin(context.Background(), ref, amd64)
	if !errors.Is(err, errDenied) || strings.Contains(err.Error(), pass) {
		t.Errorf("Pin with a wrong password = %v, %v; want errDenied without the password", bad, err)
	}
	got, err := New(&Options{Keychain: staticKeychain{user, pass}}).Pin(context.Background(), ref, amd64)
	if err != nil || got.Digest() != d {
		t.Errorf("Pin with the keychain = %s, %v; want %s", got.Digest(), err, d)
	}
}

// recorder is a transport that never dials: it records URLs and fails.
type recorder struct {
	mu   sync.Mutex
	urls []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL.Scheme+"://"+req.URL.Host+req.URL.Path)
	r.mu.Unlock()
	return nil, errors.New("recorder: no network in tests")
}

func (r *recorder) plainHTTP() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range r.urls {
		if strings.HasPrefix(u, "http://") {
			out = append(out, u)
		}
	}
	return out
}

// Plain HTTP is refused for a non-loopback registry unless the host opts in.
func TestPlainHTTPOnlyForLoopbackOrOptIn(t *testing.T) {
	t.Parallel()
	ref := images.MustParseReference("10.0.0.5:5000/app:v1")

	rec := &recorder{}
	_, err := New(&Options{Transport: rec}).Pin(context.Background(), ref, amd64)
	if !errors.Is(err, errInsecureRegistry) {
		t.Errorf("Pin of a private-network registry: %v, want errInsecureRegistry", err)
	}
	if got := rec.plainHTTP(); len(got) != 0 {
		t.Errorf("plain-HTTP requests reached the transport: %v", got)
	}

	opted := &recorder{}
	_, err = New(&Options{Transport: opted, InsecureRegistries: []string{"10.0.0.5:5000"}}).Pin(context.Background(), ref, amd64)
	if errors.Is(err, errInsecureRegistry) || !errors.Is(err, errRegistry) {
		t.Errorf("opted-in Pin error = %v, want errRegistry from the transport", err)
	}
	if got := opted.plainHTTP(); len(got) == 0 {
		t.Error("the opted-in registry was never tried over plain HTTP")
	}
}

// Snapshot references and the zero Reference are not registry references;
// a half-given platform is refused; neither makes a request.
func TestNotRegistryReference(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := New(&Options{Transport: rec})
	for _, ref := range []images.Reference{{}, images.MustParseReference("snapshot:daytona/abc"), images.MustParseReference("snapshot-name:daytona/abc")} {
		if _, err := r.Pin(context.Background(), ref, amd64); !errors.Is(err, errNotRegistry) {
			t.Errorf("Pin(%q) = %v, want errNotRegistry", ref, err)
		}
	}
	if _, err := r.Pin(context.Background(), images.MustParseReference("127.0.0.1:1/app:v1"), v1.Platform{OS: "linux"}); !errors.Is(err, errInvalidPlatform) {
		t.Errorf("Pin for a platform without architecture = %v, want errInvalidPlatform", err)
	}
	if len(rec.urls) != 0 {
		t.Errorf("requests were made: %v", rec.urls)
	}
}
