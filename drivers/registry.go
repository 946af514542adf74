package drivers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Registry holds the drivers a host composed. Its set of drivers is
// immutable after NewRegistry and safe for concurrent use. There is no default registry.
type Registry struct {
	byName map[string]Driver
	names  []string

	closeOnce sync.Once
	closeErr  error
}

// NewRegistry returns a registry of ds. It panics if two drivers share a name
// or a name is empty: that is a programming error in the host.
func NewRegistry(ds ...Driver) *Registry {
	r := &Registry{byName: make(map[string]Driver, len(ds))}
	for _, d := range ds {
		n := d.Name()
		if n == "" || strings.TrimSpace(n) != n {
			panic(fmt.Sprintf("drivers: invalid driver name %q", n))
		}
		if _, dup := r.byName[n]; dup {
			panic(fmt.Sprintf("drivers: driver %q registered twice", n))
		}
		r.byName[n] = d
		r.names = append(r.names, n)
	}
	slices.Sort(r.names)
	return r
}

// Lookup returns the driver named name, or an error wrapping ErrUnavailable
// when no such driver is registered (CAP-3).
func (r *Registry) Lookup(name string) (Driver, error) {
	if d, ok := r.byName[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("driver %q is not registered: %w", name, ErrUnavailable)
}

// Close closes every registered driver that implements io.Closer (see
// closeDriver), in name order, once: later calls do nothing and return nil. It
// returns the joined errors of the drivers that failed, each naming its
// driver. The registry itself stays usable for lookups and listings.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		for _, n := range r.names {
			errs = append(errs, closeDriver(r.byName[n]))
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// DriverInfo describes a registered driver for listings. Building it does no
// I/O and allocates nothing at any provider (CAP-1).
type DriverInfo struct {
	Name          string        `json:"name"`
	Kind          Kind          `json:"kind"`
	Declared      Set           `json:"declared"`
	Effective     Set           `json:"effective"`
	Available     bool          `json:"available"`
	Reason        string        `json:"reason,omitempty"` // why unavailable
	StartupBudget time.Duration `json:"startupBudget,omitempty"`
	// Isolation is the level the driver declares for its defaults
	// (IsolationOf with a nil config); an environment's config may raise it
	// (Docker's runtime).
	Isolation Isolation `json:"isolation"`
	// Plugin is the plugin that serves the driver (PluginReporter): its
	// binary, version and the operator's pin. It is nil for a driver
	// compiled into the host.
	Plugin *PluginInfo `json:"plugin,omitempty"`
}

// describe returns the DriverInfo of the registered driver d.
func describe(name string, d Driver) DriverInfo {
	c := d.Capabilities()
	info := DriverInfo{
		Name:          name,
		Kind:          c.Kind,
		Declared:      c.Declared,
		Effective:     Effective(d, 0),
		Available:     true,
		StartupBudget: c.StartupBudget,
		Isolation:     IsolationOf(d, nil),
	}
	if err := Available(d); err != nil {
		info.Available = false
		info.Reason = err.Error()
	}
	if pr, ok := d.(PluginReporter); ok {
		p := pr.PluginInfo()
		info.Plugin = &p
	}
	return info
}

// List describes every registered driver, sorted by name.
func (r *Registry) List() []DriverInfo {
	out := make([]DriverInfo, 0, len(r.names))
	for _, n := range r.names {
		out = append(out, describe(n, r.byName[n]))
	}
	return out
}
