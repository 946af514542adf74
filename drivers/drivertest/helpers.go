package drivertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/images"
)

// ImageHarness is an optional interface that may be implemented by a
// Harness whose driver has images. ConfigWithImage returns a config like
// Config that makes sandboxes run the image id (for example a captured
// template). If a Harness does not implement it, the suite checks capture
// and template deletion without acquiring the captured image.
type ImageHarness interface {
	ConfigWithImage(id images.Identity) (config.Config, bool)
}

// bound is how long the suite lets one blocking step take before it fails
// the test. It is a guard against hangs, not a performance claim.
const bound = 30 * time.Second

// promptBound is the guard for steps that must end promptly, such as a
// cancelled command.
const promptBound = 10 * time.Second

func uniqueSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// subtest runs body with a fresh harness, closed when the subtest ends.
func subtest(t *testing.T, name string, mk HarnessMaker, body func(t *testing.T, ctx context.Context, h Harness)) {
	t.Run(name, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*bound)
		defer cancel()
		h, err := mk(ctx, t)
		if err != nil {
			t.Fatalf("harness: %v", err)
		}
		defer h.Close()
		body(t, ctx, h)
	})
}

// gated is subtest that is skipped unless the driver's effective
// capabilities hold c.
func gated(t *testing.T, name string, c drivers.Capability, mk HarnessMaker, body func(t *testing.T, ctx context.Context, h Harness)) {
	subtest(t, name, mk, func(t *testing.T, ctx context.Context, h Harness) {
		if !drivers.Effective(h.Driver(), 0).Has(c) {
			t.Skipf("driver %q does not declare %s", h.Driver().Name(), c)
		}
		body(t, ctx, h)
	})
}

// ungated is subtest that is skipped when c is effective for the driver
// under the harness's config (declared and not narrowed by it): it checks
// what a driver without c must do.
func ungated(t *testing.T, name string, c drivers.Capability, mk HarnessMaker, body func(t *testing.T, ctx context.Context, h Harness)) {
	subtest(t, name, mk, func(t *testing.T, ctx context.Context, h Harness) {
		d := h.Driver()
		if drivers.Effective(d, drivers.ConfigNarrowing(d, h.Config())).Has(c) {
			t.Skipf("driver %q offers %s", d.Name(), c)
		}
		body(t, ctx, h)
	})
}

// acquire acquires a sandbox and destroys it at cleanup unless the test
// released it.
func acquire(t *testing.T, ctx context.Context, h Harness, req drivers.AcquireRequest) drivers.Sandbox {
	t.Helper()
	sb, err := h.Driver().Acquire(ctx, h.Config(), req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if sb.ID() == "" {
		t.Fatalf("Acquire returned a sandbox with an empty ID")
	}
	t.Cleanup(func() { cleanup(t, h, sb) })
	return sb
}

func cleanup(t *testing.T, h Harness, sb drivers.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil && !errors.Is(err, drivers.ErrReleased) {
		t.Logf("cleanup: release %s: %v", sb.ID(), err)
	}
}

func execOK(t *testing.T, ctx context.Context, sb drivers.Sandbox, cmd drivers.Command) *drivers.Result {
	t.Helper()
	res, err := sb.Exec(ctx, cmd)
	if err != nil {
		t.Fatalf("Exec %q: %v", cmd.Argv, err)
	}
	return res
}

func sh(script string) drivers.Command { return drivers.Command{Argv: []string{"sh", "-c", script}} }

// within runs f and fails the test if it does not return within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// watcher collects what is written to it and tells when a string appeared.
type watcher struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newWatcher() *watcher { return &watcher{changed: make(chan struct{})} }

func (w *watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

func (w *watcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor blocks until the collected output contains s, or fails the test
// after bound.
func (w *watcher) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(bound)
	for {
		w.mu.Lock()
		ok := strings.Contains(w.buf.String(), s)
		ch := w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("output %q does not contain %q after %s", w.String(), s, bound)
		}
	}
}

// waitUntil is waitFor for other goroutines than the test's: it reports
// whether the output contains s before bound passes or ctx ends.
func (w *watcher) waitUntil(ctx context.Context, s string) bool {
	deadline := time.After(bound)
	for {
		w.mu.Lock()
		ok := strings.Contains(w.buf.String(), s)
		ch := w.changed
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// pump copies r into w until r ends.
func pump(r io.Reader, w io.Writer) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(w, r)
	}()
	return done
}
