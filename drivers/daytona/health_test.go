package daytona_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/reason"
)

// CheckHealth against the fake API (CAP-3, PRB-5): a live API and a valid
// key pass without allocating anything; a refused key is ErrAuth; an API
// that answers its liveness route with 503 is ErrUnavailable; the endpoint
// names the key's secret reference, never the key.
func TestCheckHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := e.config(t, e.snap.ID)
	if err := e.drv.CheckHealth(ctx, cfg); err != nil {
		t.Fatalf("CheckHealth of a live API: %v", err)
	}
	if n := e.srv.Calls(daytonafake.RouteCreateSandbox); n != 0 {
		t.Errorf("a health check created %d sandboxes", n)
	}
	if n := e.srv.Calls(daytonafake.RouteHealth); n != 1 {
		t.Errorf("GET /health called %d times, want 1", n)
	}

	stored := cfg.Clone()
	ref := config.SecretRef{ID: "sec_1", Version: 2}
	stored["api_key"] = ref
	if ep := e.drv.Endpoint(stored); ep != e.srv.URL()+" account "+ref.String() {
		t.Errorf("Endpoint of a stored config = %q", ep)
	}
	if ep := e.drv.Endpoint(cfg); strings.Contains(ep, e.srv.APIKey()) {
		t.Errorf("Endpoint holds the key: %q", ep)
	}

	bad := cfg.Clone()
	bad["api_key"] = "dtn_wrong_key_0123456789abcdef"
	if err := e.drv.CheckHealth(ctx, bad); !errors.Is(err, drivers.ErrAuth) || strings.Contains(err.Error(), "dtn_wrong_key") {
		t.Errorf("CheckHealth with a refused key = %v, want ErrAuth without the key", err)
	} else if m := errcode.MessageOf(err); !strings.Contains(m, "refused the API key") || !strings.Contains(m, "401") || strings.Contains(m, "dtn_wrong_key") {
		t.Errorf("a refused key's message %q: want it to say so with the status, without the key", m)
	}

	e.srv.InjectFault(daytonafake.Fault{Route: daytonafake.RouteHealth, Status: http.StatusServiceUnavailable, Message: "Service Unavailable"})
	if err := e.drv.CheckHealth(ctx, cfg); !errors.Is(err, drivers.ErrUnavailable) || reason.Of(err) != reason.ProviderUnavailable {
		t.Errorf("CheckHealth of an API that is not live = %v (code %s), want ErrUnavailable", err, reason.Of(err))
	}
}

// An API whose certificate fails verification is tls_unverified in the
// health check too, never unavailable (PRB-5).
func TestCheckHealthTLSUnverified(t *testing.T) {
	t.Parallel()
	srv, err := daytonafake.New(&daytonafake.Options{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	drv := daytona.NewConcrete(nil)
	cfg, err := drv.Schema().Normalize(map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey(), "snapshot_id": "0b6c1a9e-8d2f-4c3b-9a1e-5f7d2c4b6a80"})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.CheckHealth(context.Background(), cfg); !errors.Is(err, drivers.ErrTLSUnverified) || reason.Of(err) != reason.TLSUnverified {
		t.Errorf("CheckHealth against an untrusted certificate = %v (code %s)", err, reason.Of(err))
	} else if m := errcode.MessageOf(err); !strings.Contains(m, "certificate") || !strings.Contains(m, "failed verification") {
		t.Errorf("an untrusted certificate's message %q", m)
	}
}
