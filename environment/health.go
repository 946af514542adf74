package environment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/berthdev/berth/errcode"
)

// ProviderHealth is the last measured health of one provider endpoint
// (CAP-3): a driver plus the endpoint its configs address (see
// drivers.HealthChecker). The next measurement replaces it, so a success
// clears an earlier failure.
type ProviderHealth struct {
	Driver   string `json:"driver"`
	Endpoint string `json:"endpoint"`
	// Available is true when the provider served the ping.
	Available bool `json:"available"`
	// Code is the stable code of the failure, one of the probe's reasons
	// (docs/errors.md; "provider_unavailable" when the ping failed); "" when
	// Available.
	Code string `json:"code,omitempty"`
	// Reason says what failed; never a secret. "" when Available.
	Reason string `json:"reason,omitempty"`
	// CheckedAt is when the measurement ended.
	CheckedAt time.Time `json:"checkedAt"`
}

// HealthStore persists provider health, one record per driver and endpoint,
// so that separate processes sharing a store see the same measurements.
// Implementations: memoryHealthStore here, SQLite and PostgreSQL in
// store/sqlite and store/postgres; all pass the store conformance suite. A HealthStore is
// safe for concurrent use.
type HealthStore interface {
	// PutProviderHealth stores h, replacing the record of the same driver
	// and endpoint.
	PutProviderHealth(ctx context.Context, h ProviderHealth) error
	// GetProviderHealth returns the record of driver and endpoint, or an
	// error wrapping errcode.ErrNotFound when the endpoint was never measured.
	GetProviderHealth(ctx context.Context, driver, endpoint string) (ProviderHealth, error)
	// ListProviderHealth returns every record, sorted by driver, then
	// endpoint; an empty list when there is none.
	ListProviderHealth(ctx context.Context) ([]ProviderHealth, error)
}

// HealthStatus is what a listing says of an environment's provider.
type HealthStatus string

// The health statuses.
const (
	// HealthAvailable: last measured available.
	HealthAvailable HealthStatus = "available"
	// HealthUnavailable: last measured unavailable; the environment cannot
	// become a working target until a measurement succeeds.
	HealthUnavailable HealthStatus = "unavailable"
	// HealthNotMeasured: never measured; it counts as available.
	HealthNotMeasured HealthStatus = "not_measured"
)

// HealthView is the provider health shown with an environment: the last
// measurement and its time, never a new one (CAP-1).
type HealthView struct {
	Status   HealthStatus `json:"status"`
	Endpoint string       `json:"endpoint"`
	Code     string       `json:"code,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	// CheckedAt is nil when never measured.
	CheckedAt *time.Time `json:"checkedAt,omitempty"`
}

// String returns "available (measured 2026-...)", "not measured" or
// "unavailable (measured ...): REASON".
func (h *HealthView) String() string {
	switch h.Status {
	case HealthNotMeasured:
		return "not measured"
	case HealthUnavailable:
		return fmt.Sprintf("unavailable (measured %s): %s", h.CheckedAt.UTC().Format(time.RFC3339), h.Reason)
	}
	return fmt.Sprintf("available (measured %s)", h.CheckedAt.UTC().Format(time.RFC3339))
}

func healthView(endpoint string, h ProviderHealth, measured bool) *HealthView {
	if !measured {
		return &HealthView{Status: HealthNotMeasured, Endpoint: endpoint}
	}
	at := h.CheckedAt.UTC()
	v := &HealthView{Status: HealthAvailable, Endpoint: endpoint, CheckedAt: &at}
	if !h.Available {
		v.Status, v.Code, v.Reason = HealthUnavailable, h.Code, h.Reason
	}
	return v
}

// memoryHealthStore is newMemoryHealthStore's HealthStore.
type memoryHealthStore struct {
	mu   sync.Mutex
	recs map[[2]string]ProviderHealth
}

var _ HealthStore = (*memoryHealthStore)(nil)

// newMemoryHealthStore returns an empty in-memory HealthStore, safe for
// concurrent use.
func newMemoryHealthStore() HealthStore {
	return &memoryHealthStore{recs: map[[2]string]ProviderHealth{}}
}

// PutProviderHealth implements HealthStore.
func (m *memoryHealthStore) PutProviderHealth(ctx context.Context, h ProviderHealth) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if h.Driver == "" || h.Endpoint == "" {
		return fmt.Errorf("environment: provider health needs a driver and an endpoint: %w", errcode.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[[2]string{h.Driver, h.Endpoint}] = h
	return nil
}

// GetProviderHealth implements HealthStore.
func (m *memoryHealthStore) GetProviderHealth(ctx context.Context, driver, endpoint string) (ProviderHealth, error) {
	if err := ctx.Err(); err != nil {
		return ProviderHealth{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.recs[[2]string{driver, endpoint}]; ok {
		return h, nil
	}
	return ProviderHealth{}, healthNotFound{driver, endpoint}
}

// healthNotFound is the memory store's "no measurement" error: the gate
// asks on every lease and most providers are never measured, so it is a
// value formatted only when printed, not a fmt.Errorf.
type healthNotFound struct{ driver, endpoint string }

func (e healthNotFound) Error() string {
	return fmt.Sprintf("environment: health of provider %s at %s: %v", e.driver, e.endpoint, errcode.ErrNotFound)
}

func (e healthNotFound) Unwrap() error { return errcode.ErrNotFound }

// ListProviderHealth implements HealthStore.
func (m *memoryHealthStore) ListProviderHealth(ctx context.Context) ([]ProviderHealth, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	out := make([]ProviderHealth, 0, len(m.recs))
	for _, h := range m.recs {
		out = append(out, h)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b ProviderHealth) int {
		return cmp.Or(cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Endpoint, b.Endpoint))
	})
	return out, nil
}

// defaultHealthStaleness is how old a provider health record a
// cachedHealthStore answers with: the age of the instance settings'
// cache too.
const defaultHealthStaleness = time.Second

// cachedHealthStore wraps st with a cache of its reads for the gate, which
// reads an environment's provider health on every lease: a record, or
// its absence, is answered from the cache for up to maxStaleness
// (one second when 0). A put through the wrapper replaces the
// cached record at once, so this process sees its own measurements
// immediately; another process's measurement is seen within
// maxStaleness. A negative maxStaleness returns st. Lists are not cached.
func cachedHealthStore(st HealthStore, maxStaleness time.Duration) HealthStore {
	if maxStaleness < 0 {
		return st
	}
	if maxStaleness == 0 {
		maxStaleness = defaultHealthStaleness
	}
	return &cachedHealth{st: st, max: maxStaleness, m: map[[2]string]cachedHealthRec{}}
}

type cachedHealth struct {
	st  HealthStore
	max time.Duration
	mu  sync.Mutex
	m   map[[2]string]cachedHealthRec
	gen uint64 // bumped by every put: a read that began before it is not cached
}

type cachedHealthRec struct {
	h     ProviderHealth
	found bool
	at    time.Time
}

// maxCachedHealth bounds the cache; it starts over when full.
const maxCachedHealth = 1024

func (c *cachedHealth) PutProviderHealth(ctx context.Context, h ProviderHealth) error {
	err := c.st.PutProviderHealth(ctx, h)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	k := [2]string{h.Driver, h.Endpoint}
	if err != nil {
		delete(c.m, k) // the write may or may not have landed
		return err
	}
	c.m[k] = cachedHealthRec{h: h, found: true, at: time.Now()}
	return nil
}

func (c *cachedHealth) GetProviderHealth(ctx context.Context, driver, endpoint string) (ProviderHealth, error) {
	if err := ctx.Err(); err != nil {
		return ProviderHealth{}, err
	}
	k := [2]string{driver, endpoint}
	c.mu.Lock()
	r, ok := c.m[k]
	gen := c.gen
	c.mu.Unlock()
	if ok && time.Since(r.at) < c.max {
		if !r.found {
			return ProviderHealth{}, healthNotFound{driver, endpoint}
		}
		return r.h, nil
	}
	at := time.Now()
	h, err := c.st.GetProviderHealth(ctx, driver, endpoint)
	found := err == nil
	if err != nil && !errors.Is(err, errcode.ErrNotFound) {
		return h, err
	}
	c.mu.Lock()
	if c.gen == gen {
		if len(c.m) >= maxCachedHealth {
			clear(c.m)
		}
		c.m[k] = cachedHealthRec{h: h, found: found, at: at}
	}
	c.mu.Unlock()
	return h, err
}

func (c *cachedHealth) ListProviderHealth(ctx context.Context) ([]ProviderHealth, error) {
	return c.st.ListProviderHealth(ctx)
}
