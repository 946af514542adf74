package daytona_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/reason"
)

// tokenTrap is a loopback server that records every Authorization header
// it is sent: a place the API key must never reach.
type tokenTrap struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth []string
}

func newTokenTrap(t *testing.T) *tokenTrap {
	t.Helper()
	tr := &tokenTrap{}
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.auth = append(tr.auth, r.Header.Get("Authorization"))
		tr.mu.Unlock()
		http.Error(w, "trap", http.StatusTeapot)
	}))
	t.Cleanup(tr.srv.Close)
	return tr
}

func (tr *tokenTrap) seen() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.auth...)
}

// CFG-3 (issue #13 item 9): a provider message longer than the cut the
// client makes, with the key spanning the cut, is redacted before it is
// shortened, and so is any run of 8 or more bytes of the key (a key the
// provider itself cut).
func TestAPIKeyRedactedAcrossTruncation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := e.srv.APIKey()
	cfg := e.config(t, e.snap.ID)
	for _, msg := range []string{
		strings.Repeat("x", 290) + key + " trailing", // the key spans the 300-byte cut
		"provider cut the token: " + key[:9],         // a prefix of the key
		"middle of it: " + key[3:12] + " end",        // an inner run of 9 bytes
	} {
		e.srv.InjectFault(daytonafake.Fault{Route: daytonafake.RouteGetSnapshot, Status: 400, Message: msg})
		_, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
		if err == nil {
			t.Fatalf("Acquire with a faulted snapshot read succeeded")
		}
		for i := 0; i+8 <= len(key); i++ {
			if strings.Contains(err.Error(), key[i:i+8]) {
				t.Fatalf("error %q contains %q, 8 bytes of the API key", err, key[i:i+8])
			}
		}
		if !strings.Contains(err.Error(), config.Redacted) {
			t.Errorf("error %q: want the key's part replaced by %s", err, config.Redacted)
		}
	}
}

// Issue #13 item 10: a toolbox answer far beyond what the command's output
// limit allows (a command writing to the wrapper's own stdout) fails the
// Exec with a clear error instead of being read whole.
func TestExecAnswerIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	// The wrapper's stdout is the toolbox's answer; the command writes 4 MiB
	// to it directly, past the files the wrapper gave it.
	res, err := sb.Exec(ctx, drivers.Command{
		Argv:        []string{"sh", "-c", `yes | head -c 4194304 >/proc/$PPID/fd/1; echo small`},
		OutputLimit: 1024,
	})
	if err == nil {
		t.Fatalf("Exec with a 4 MiB answer for a 1 KiB limit succeeded: %d bytes of stdout, %d of stderr", len(res.Stdout), len(res.Stderr))
	}
	if !strings.Contains(err.Error(), "size bound") || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("error %q does not say that the answer exceeded its bound", err)
	}
	// A command within its limit still works.
	res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "yes | head -c 5000"}, OutputLimit: 1024})
	if err != nil || len(res.Stdout) != 1024 || !res.Truncated {
		t.Fatalf("Exec within bounds: %v, %d bytes, truncated %v", err, len(res.Stdout), res != nil && res.Truncated)
	}
}

// Issue #13 item 11: a redirect to the same host on another port is not
// followed, so the bearer token does not reach that port.
func TestRedirectToAnotherPortIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	trap := newTokenTrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.srv.InjectFault(daytonafake.Fault{Route: daytonafake.RouteGetSnapshot, Count: -1,
		Location: trap.srv.URL + "/api/snapshots/" + e.snap.ID})
	_, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err == nil || !strings.Contains(err.Error(), "redirect refused") {
		t.Errorf("Acquire through a redirect to another port: err = %v, want the redirect refused", err)
	}
	if got := trap.seen(); len(got) != 0 {
		t.Errorf("the redirect target got %d requests (Authorization %q)", len(got), got)
	}
	if n := e.srv.Calls(daytonafake.RouteGetSnapshot); n != 1 {
		t.Errorf("%d snapshot reads, want 1: a refused redirect is not retried", n)
	}
}

// Issue #13 item 11: the token goes to a toolbox proxy URL only when it is
// the API's own origin or https; an http proxy elsewhere is refused.
func TestTokenNotSentToPlainHTTPToolboxElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	trap := newTokenTrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	e.srv.SetKnobs(func(k *daytonafake.Knobs) { k.ToolboxProxyURL = trap.srv.URL + "/toolbox" })
	// A fresh handle reads the proxy URL the API reports now.
	r, _ := drivers.DriverAs[drivers.Resumer](e.drv)
	again, err := r.Resume(ctx, e.config(t, e.snap.ID), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	_, err = again.Exec(ctx, drivers.Command{Argv: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "refusing to send the API key") {
		t.Errorf("Exec through an http toolbox proxy on another origin: err = %v, want a refusal", err)
	}
	if got := trap.seen(); len(got) != 0 {
		t.Errorf("the foreign toolbox proxy got %d requests (Authorization %q)", len(got), got)
	}
}

// Issue #13 item 11: api_url must be https unless its host is loopback.
func TestAPIURLNeedsHTTPSOffLoopback(t *testing.T) {
	t.Parallel()
	drv := daytona.NewConcrete(nil)
	for url, ok := range map[string]bool{
		"https://app.daytona.io/api":  true,
		"http://127.0.0.1:3000/api":   true,
		"http://[::1]:3000/api":       true,
		"http://localhost:3000/api":   true,
		"http://app.daytona.io/api":   false,
		"http://10.0.0.5:3000/api":    false,
		"ftp://app.daytona.io/api":    false,
		"https://u:p@app.daytona.io/": false,
	} {
		_, err := drv.Schema().Normalize(map[string]any{
			"api_url": url, "api_key": "k",
			"snapshot_id": "0b5f6f3e-8f43-4d7c-9a0e-5a3c2b1d4e6f",
		})
		if (err == nil) != ok {
			t.Errorf("api_url %q: err = %v, want accepted %v", url, err, ok)
		}
		if err != nil && !errors.Is(err, config.ErrInvalid) {
			t.Errorf("api_url %q: err = %v, want config.ErrInvalid", url, err)
		}
	}
}

// countingTransport counts round trips.
type countingTransport struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// Issue #13 item 12, PRB-5: a certificate the client does not trust is
// ErrTLSUnverified (code tls_unverified), tried once and never retried.
func TestTLSVerificationFailureIsPermanent(t *testing.T) {
	t.Parallel()
	srv, err := daytonafake.New(&daytonafake.Options{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	snap, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTransport{next: http.DefaultTransport.(*http.Transport).Clone()}
	drv := daytona.NewConcrete(&daytona.Options{
		HTTPClient: &http.Client{Transport: ct}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
	})
	cfg, err := drv.Schema().Normalize(map[string]any{
		"api_url": srv.URL(), "api_key": srv.APIKey(), "snapshot_id": snap.ID,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrTLSUnverified) || reason.Of(err) != reason.TLSUnverified {
		t.Fatalf("Acquire against an untrusted certificate: err = %v (code %s), want ErrTLSUnverified", err, reason.Of(err))
	}
	if errors.Is(err, drivers.ErrTransient) {
		t.Errorf("err = %v also wraps ErrTransient", err)
	}
	if n := ct.n.Load(); n != 1 {
		t.Errorf("%d requests, want 1: a TLS verification failure is not retried", n)
	}

	// The same server through a client that trusts its certificate works.
	ok := daytona.NewConcrete(&daytona.Options{HTTPClient: srv.Client(), PollInterval: time.Millisecond, PollMax: 5 * time.Millisecond})
	sb, err := ok.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("Acquire with a trusting client: %v", err)
	}
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
}
